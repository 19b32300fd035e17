#!/bin/bash
# T=2 and T=4 (one pass), T=16? alternations of v0 and v2
for round in 1 2 3; do
  for v in 0 2; do
    o=""
    for T in 2 4 6; do
      a=$(Q4V=$v ./build-x/bench_mm -f q4 -P fast -p $T -n 0 -c -t 1 -r 5 2>&1 | awk '$1=="layer"{print $3}')
      o="$o T$T $a"
    done
    echo "round $round v$v $o"
  done
done
