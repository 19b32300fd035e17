#!/usr/bin/env bash
# session 18, call 4: one-row bf16 products with the next loads issued before the current
# ones are multiplied (kernel_mv_16p, U = 2, 3 or 4 loads a batch; CUK_MV16_P=U,
# experiment knob; 0 = kernel_mv_16) against kernel_mv_16; the int8 q4 kernel at three
# blocks an SM (the tree's default now). GPU tests first (kernels and graphs also with
# the new kernel).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s18d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for pv in 2 4; do
  CUK_MV16_P=$pv timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-p$pv.log 2>&1; el "kernels p$pv rc=$? $(tail -n 1 $O/kernels-p$pv.log)"
done
CUK_MV16_P=4 timeout 200 $N/tests/cuda/test_cuda_graph > $O/graph-p4.log 2>&1; el "graph p4 rc=$? $(tail -n 1 $O/graph-p4.log)"
grep -E "FAIL" $O/kernels*.log $O/graph*.log | head -6
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for pv in 0 2 3 4; do b l8-p$pv CUK_MV16_P=$pv --synth llama3-8b -p 0 -n 128 -r 3; done
  for pv in 0 2 3 4; do b g3-p$pv CUK_MV16_P=$pv --synth gemma3-4b -p 0 -n 128 -r 3; done
done
for pv in 0 4; do b q06-p$pv CUK_MV16_P=$pv --synth qwen3-0.6b -p 0 -n 128 -r 3; done
for pv in 0 4; do b l8-d4096-p$pv CUK_MV16_P=$pv --synth llama3-8b -p 0 -n 128 -r 2 -d 4096; done
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b l8q4 X=1 -m /tmp/l8q4 -p 0 -n 128 -r 3
b l8q4-d4096 X=1 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
tar -C /tmp -cJf $OUT/r.tar.xz r
