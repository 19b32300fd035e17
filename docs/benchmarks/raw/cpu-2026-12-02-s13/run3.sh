#!/bin/bash
# -npl 8 only: Q4V 0 / 2 / 3 / 1, five alternations
cd /work/main
for round in 1 2 3 4 5; do
  o="round $round"
  for v in 0 2 3 1; do
    Q4V=$v build-x/celer bench -m /tmp/q06q4 -npl 8 -p 8 -n 128 -t 2 --precision fast -r 1 -o md > /tmp/cab/w$v-$round.md 2>&1
    o="$o  v$v $(grep -E '^\| +8 ' /tmp/cab/w$v-$round.md | awk -F'|' '{print $9}' | tr -d ' ')"
  done
  echo "$o"
done
