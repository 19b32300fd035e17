#!/bin/bash
# A/B: main's q4dot (A, build/celer) against two weight rows a pass at T >= 2 (B, build-x/celer),
# qwen3-0.6b q4, --precision fast, 2 threads, -npl 1,2,4,8 -p 64 -n 64; three alternations
cd /work/main
for round in 1 2 3; do
  for arm in A B; do
    c=build/celer; [ $arm = B ] && c=build-x/celer
    $c bench -m /tmp/q06q4 -npl 1,2,4,8 -p 64 -n 64 -t 2 --precision fast -r 1 -o md > /tmp/cab/npl-$arm-$round.md 2>&1
    echo "round $round $arm S_TG: $(grep -E '^\| +64' /tmp/cab/npl-$arm-$round.md | awk -F'|' '{print $9}' | tr -s ' ' | tr '\n' ' ')  $(grep 'read bandwidth' /tmp/cab/npl-$arm-$round.md)"
  done
done
