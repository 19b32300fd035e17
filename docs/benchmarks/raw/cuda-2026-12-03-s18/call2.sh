#!/usr/bin/env bash
# session 18, call 2: the int8 q4 product with its weights streamed into a shared-memory
# ring by bulk copies (kernel_mv_q4g_i8r; CUK_Q4_RING=1: 8 warps a block, 2: 16, 3: 4;
# experiment knob) against the register kernel at 2 blocks an SM (default) and 3 or 4
# (CUK_Q4_MB, registers capped); the kernel and graph tests on each. Then bf16 batched
# decode with the tensor-core skinny kernel only on products of many rows
# (CUK_SKINNY=1 CUK_SKINNY_ROWS=N, experiment) against cuBLAS.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s18b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for rg in 1 2 3; do
  CUK_Q4_RING=$rg timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-ring$rg.log 2>&1; el "kernels ring$rg rc=$? $(tail -n 1 $O/kernels-ring$rg.log)"
  CUK_Q4_RING=$rg timeout 100 $N/tests/cuda/test_cuda_graph > $O/graph-ring$rg.log 2>&1; el "graph ring$rg rc=$? $(tail -n 1 $O/graph-ring$rg.log)"
done
CUK_Q4_MB=3 timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-mb3.log 2>&1; el "kernels mb3 rc=$? $(tail -n 1 $O/kernels-mb3.log)"
grep -E "FAIL" $O/kernels-*.log $O/graph-*.log | head -8
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  b l8q4-base CUK_Q4_RING=0 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-mb3 CUK_Q4_MB=3 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-mb4 CUK_Q4_MB=4 -m /tmp/l8q4 -p 0 -n 128 -r 3
  for rg in 1 2 3; do b l8q4-ring$rg CUK_Q4_RING=$rg -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats"
for rg in 1 2; do
  CUK_Q4_RING=$rg timeout 60 ncu --clock-control none -k regex:"kernel_mv_q4g_i8" -s 400 -c 4 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu-ring$rg.txt 2>&1; el "ncu ring$rg rc=$?"
  grep -E "^  [a-z_]*kernel|^  void|Duration|DRAM Throughput|Registers Per|Achieved Active|Issued Warp" $O/ncu-ring$rg.txt | cut -c1-120
done
for round in 1 2; do
  b l8-npl-cublas CUK_SKINNY=0 --synth llama3-8b -npl 8,16,32 -p 64 -n 128 -c 16384 -r 1
  b l8-npl-sk16k "CUK_SKINNY=1 CUK_SKINNY_ROWS=16384" --synth llama3-8b -npl 8,16,32 -p 64 -n 128 -c 16384 -r 1
  b l8-npl-sk100k "CUK_SKINNY=1 CUK_SKINNY_ROWS=100000" --synth llama3-8b -npl 8,16,32 -p 64 -n 128 -c 16384 -r 1
done
tar -C /tmp -cJf $OUT/r.tar.xz r
