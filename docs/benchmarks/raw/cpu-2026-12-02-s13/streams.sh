#!/bin/bash
# A/B: the one-token float GEMVs over 4 row streams (B: build-x) against main (A: build/celer),
# qwen3-0.6b bf16, 2 threads, tg128 fast and exact, three alternations
cd /work/main
for round in 1 2 3; do
  for arm in A B; do
    c=build/celer; [ $arm = B ] && c=build-x/celer
    o="round $round $arm"
    for p in fast exact; do
      $c bench -m /tmp/q06 -p 0 -n 128 -t 2 --precision $p -r 2 -o md > /tmp/cab/st-$arm-$p-$round.md 2>&1
      o="$o  $p tg128 $(grep -E 'tg128 ' /tmp/cab/st-$arm-$p-$round.md | head -1 | awk -F'|' '{print $(NF-1)}' | tr -s ' ') $(grep -E '^tg128:' /tmp/cab/st-$arm-$p-$round.md | grep -o '= [0-9]*% of')"
    done
    echo "$o"
  done
done
