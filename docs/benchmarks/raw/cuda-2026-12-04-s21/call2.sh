#!/usr/bin/env bash
# session 21, call 2: step_ops.c's overlap checks through one helper (floats_apart):
# the graph, decode, batch, kv and kernel tests, the fixture and snapshot tests on the
# GPU; then the tensor-core decode kernel (CUK_SKINNY=1) against cuBLAS at 8 and 32
# sequences of llama3-8b bf16 (issue 16's 32-sequence goal), alternated.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s21b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
CUK_MV_GLU=0 timeout 300 $N/tests/cuda/test_cuda_graph > "$O/graph-glu0.log" 2>&1; el "graph glu0 rc=$? $(tail -n 1 $O/graph-glu0.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +64' $O/$l.md | tail -n 2 | awk -F'|' '{printf "%s ", $9}')"
}
for round in 1 2; do
  b npl-blas X=1 --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
  b npl-skinny CUK_SKINNY=1 --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
done
b l8-d4096 X=1 --synth llama3-8b -p 0 -n 128 -r 3 -d 4096
tar -C /tmp -cJf $OUT/r.tar.xz r
