#!/usr/bin/env bash
# session 15, call 1: quantized prefill through a fast dequantization (dequant.cu, eight
# codes a thread) and cuBLAS for products of more than CUK_QGEMM_MAX_T rows.
# Tests (qgemm incl. the new dequant test, a deliberately broken copy, kernels, graph,
# fixtures exact, precision envelope with the default and with every affine product
# dequantized), the kernel benchmark, then pp512/tg128 A/B: fused at every T (old) vs new.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 200 $N/tests/cuda/test_cuda_qgemm --bench > $O/qgemm.log 2>&1; el "qgemm rc=$? $(tail -n 1 $O/qgemm.log)"
grep -E "FAIL" $O/qgemm.log | head -5
timeout 100 $N/tests/cuda/test_cuda_qgemm_broken > $O/qgemm-broken.log 2>&1; el "qgemm broken rc=$? $(tail -n 1 $O/qgemm-broken.log)"
grep -E "FAIL" $O/qgemm-broken.log | head -4
for t in test_cuda_kernels test_cuda_graph; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 200 env CUK_QGEMM_MAX_T=0 $N/tests/cuda/test_cuda_precision > $O/precision-t0.log 2>&1; el "precision (all dequant) rc=$? $(tail -n 1 $O/precision-t0.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
timeout 60 $N/celer synth --shape qwen3-0.6b --q4 -o /tmp/q06q4 >> $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env value for CUK_QGEMM_MAX_T, args
  local l=$1 a=$2; shift 2
  CUK_QGEMM_MAX_T=$a timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  el "$l T<=$a rc=$? $(grep -E '^\| [a-z]' $O/$l-$a.md | tail -n 2 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for a in 100000 128; do
    [ $(( $(date +%s) - t0 )) -gt 470 ] && break 2
    b l8q4 $a -m /tmp/l8q4 -p 512 -n 128 -r 2
    b q06q4 $a -m /tmp/q06q4 -p 512 -n 0 -r 3
  done
done
[ $(( $(date +%s) - t0 )) -lt 500 ] && b l8q4-exact 128 -m /tmp/l8q4 --precision exact -p 512 -n 0 -r 2
[ $(( $(date +%s) - t0 )) -lt 530 ] && { CELER_STATS=1 timeout 60 $N/celer bench --device cuda --synth llama3-8b -npl 32 -p 64 -n 64 -r 1 > $O/stats-npl32.log 2>&1; el "npl32 stats rc=$?"; grep -E "median replay|S_TG|\| *32" $O/stats-npl32.log | head; }
tar -C /tmp -cJf $OUT/r.tar.xz r
