#!/bin/bash
# A/B: rmsnorm over 8 partial sums and the avx512 SiLU (B: build-x) against main (A: build/celer),
# qwen3-0.6b q4 and bf16, --precision fast, 2 threads, pp512 and tg128, three alternations
cd /work/main
for round in 1 2 3; do
  for arm in A B; do
    c=build/celer; [ $arm = B ] && c=build-x/celer
    o="round $round $arm"
    for m in q06q4 q06; do
      $c bench -m /tmp/$m -p 512 -n 128 -t 2 --precision fast -r 2 -o md > /tmp/cab/ops-$arm-$m-$round.md 2>&1
      o="$o  $m pp512 $(grep -E 'pp512 ' /tmp/cab/ops-$arm-$m-$round.md | head -1 | awk -F'|' '{print $(NF-1)}' | tr -s ' ') tg128 $(grep -E 'tg128 ' /tmp/cab/ops-$arm-$m-$round.md | head -1 | awk -F'|' '{print $(NF-1)}' | tr -s ' ')"
    done
    echo "$o"
  done
done
