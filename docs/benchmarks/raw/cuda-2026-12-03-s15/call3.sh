#!/usr/bin/env bash
# session 15, call 3: the fused kernel's k walk split over blockIdx.z for products of
# few tiles (qg_splits). Tests (qgemm with split shapes, broken copy, kernels, graph,
# batch, fixtures, precision), the kernel benchmark (fused with splits vs dequantize +
# cuBLAS, T = 8..512), then llama3-8b q4 -npl 8,32: the fused kernel for every feature
# count (CUK_QGEMM_MIN_ROWS=0) vs the default, and the matvec kernels to 8 rows.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 250 $N/tests/cuda/test_cuda_qgemm --bench > $O/qgemm.log 2>&1; el "qgemm rc=$? $(tail -n 1 $O/qgemm.log)"
grep -E "FAIL|split" $O/qgemm.log | head -30
timeout 100 $N/tests/cuda/test_cuda_qgemm_broken > $O/qgemm-broken.log 2>&1; el "qgemm broken rc=$? $(tail -n 1 $O/qgemm-broken.log)"
for t in test_cuda_kernels test_cuda_graph test_cuda_batch test_cuda_decode; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env, args
  local l=$1 a=$2; shift 2
  env $a timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l $a rc=$? $(grep -E '^\| *[0-9]' $O/$l.md | tail -n 2 | awk -F'|' '{printf "%s ", $(NF-3)}')"
}
for round in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 450 ] && break
  b npl-default NOTHING=1 -m /tmp/l8q4 -npl 8,32 -p 64 -n 64 -r 1
  b npl-fusedall CUK_QGEMM_MIN_ROWS=0 -m /tmp/l8q4 -npl 8,32 -p 64 -n 64 -r 1
  b npl-mv8 CUK_MV_BATCH_MAX=8 -m /tmp/l8q4 -npl 8 -p 64 -n 64 -r 1
done
tar -C /tmp -cJf $OUT/r.tar.xz r
