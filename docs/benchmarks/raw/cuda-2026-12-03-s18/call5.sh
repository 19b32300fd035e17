#!/usr/bin/env bash
# session 18, call 5: the int8 q4 product's weight loads: ld.global.nc with no L1
# allocation (default), with L1 allocation (__ldg: a lane's second 16-byte load reads
# the other half of the sectors its first one brought), and no allocation with the
# L2::256B prefetch-size hint (CUK_Q4_LD=0/1/2, experiment knob). Kernel tests on each arm.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s18e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for ld in 1 2; do
  CUK_Q4_LD=$ld timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-ld$ld.log 2>&1; el "kernels ld$ld rc=$? $(tail -n 1 $O/kernels-ld$ld.log)"
done
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for ld in 0 1 2; do b l8q4-ld$ld CUK_Q4_LD=$ld -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
for ld in 0 1 2; do b l8q4-d4096-ld$ld CUK_Q4_LD=$ld -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
tar -C /tmp -cJf $OUT/r.tar.xz r
