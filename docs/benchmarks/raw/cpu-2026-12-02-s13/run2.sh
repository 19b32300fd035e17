#!/bin/bash
# one binary (build-x), Q4V = 0 (one row a pass), 1 (pairs at T >= 2), 2 (pairs at T >= 5), 3 (pairs in the passes after the first, T >= 5)
cd /work/main
for round in 1 2 3; do
  for v in 0 1 2 3; do
    Q4V=$v build-x/celer bench -m /tmp/q06q4 -npl 1,2,4,8 -p 64 -n 64 -t 2 --precision fast -r 1 -o md > /tmp/cab/v$v-$round.md 2>&1
    echo "round $round v$v S_TG: $(grep -E '^\| +64' /tmp/cab/v$v-$round.md | awk -F'|' '{print $9}' | tr -s ' ' | tr '\n' ' ')  $(grep 'read bandwidth' /tmp/cab/v$v-$round.md | awk '{print $3}')"
  done
done
