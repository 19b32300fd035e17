#!/bin/bash
# alternations of the q4dot variants: T=8 layer GFLOP/s and T=1 total GB/s
for round in 1 2 3 4; do
  for v in 0 1 2; do
    a=$(Q4V=$v ./build-x/bench_mm -f q4 -P fast -p 8 -n 0 -c -t 1 -r 5 2>&1 | awk '$1=="layer"{print $3}')
    b=$(Q4V=$v ./build-x/bench_mm -f q4 -P fast -p 0 -n 32 -c -t 1 -r 5 2>&1 | awk '$1=="total"{print $4}')
    echo "round $round v$v T8 $a GFLOP/s T1 $b GB/s"
  done
done
