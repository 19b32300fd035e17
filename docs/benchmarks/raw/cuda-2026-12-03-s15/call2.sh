#!/usr/bin/env bash
# session 15, call 2: the rule for the fused kernel by rows and features
# (CUK_QGEMM_MAX_T=128, CUK_QGEMM_MIN_ROWS=12288; MXFP4 too), MXFP4's weight lo term
# dropped, and the CELER_PROFILE=3 timeline. Tests, then A/B: old (fused at every T and
# feature count) vs new, interleaved, on llama3-8b q4 (pp512, tg128, -npl 8,32) and
# gpt-oss-20b (MXFP4 experts, pp512); the timeline of llama3-8b bf16 at 32 sequences.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 200 $N/tests/cuda/test_cuda_qgemm > $O/qgemm.log 2>&1; el "qgemm rc=$? $(tail -n 1 $O/qgemm.log)"
grep -E "FAIL|worst" $O/qgemm.log | head -8
timeout 100 $N/tests/cuda/test_cuda_qgemm_broken > $O/qgemm-broken.log 2>&1; el "qgemm broken rc=$? $(tail -n 1 $O/qgemm-broken.log)"
grep -E "FAIL|values off" $O/qgemm-broken.log | head -4
for t in test_cuda_kernels test_cuda_graph test_cuda_batch test_cuda_decode test_cuda_kv; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 200 env CUK_QGEMM_MIN_ROWS=0 $N/tests/cuda/test_cuda_precision > $O/precision-fused.log 2>&1; el "precision (fused where T<=128) rc=$? $(tail -n 1 $O/precision-fused.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
timeout 150 $N/celer synth --shape gpt-oss-20b --q4 -o /tmp/goss > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, arm, args
  local l=$1 a=$2; shift 2
  if [ $a = old ]; then e="CUK_QGEMM_MAX_T=100000 CUK_QGEMM_MIN_ROWS=0"; else e="NOTHING=1"; fi
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  el "$l $a rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l-$a.md | tail -n 3 | awk -F'|' '{printf "%s/%s ", $(NF-1), $(NF-3)}')"
}
for round in 1 2; do
  for a in old new; do
    [ $(( $(date +%s) - t0 )) -gt 430 ] && break 2
    b l8q4 $a -m /tmp/l8q4 -p 512 -n 128 -r 2
    b l8q4-npl $a -m /tmp/l8q4 -npl 8,32 -p 64 -n 64 -r 1
    [ -d /tmp/goss ] && b goss $a -m /tmp/goss -p 512 -n 32 -r 2
  done
done
[ $(( $(date +%s) - t0 )) -lt 520 ] && { CELER_PROFILE=3 timeout 60 $N/celer bench --device cuda --synth llama3-8b -npl 32 -p 64 -n 64 -r 1 > $O/tl-npl32.log 2>&1; el "timeline rc=$?"; grep -A14 "cuda timeline" $O/tl-npl32.log; grep -E "^\| *64" $O/tl-npl32.log; }
[ $(( $(date +%s) - t0 )) -lt 560 ] && { CELER_PROFILE=3 timeout 40 $N/celer bench --device cuda --synth llama3-8b -p 0 -n 64 -r 1 > $O/tl-1.log 2>&1; el "timeline 1 rc=$?"; grep -A14 "cuda timeline" $O/tl-1.log; }
tar -C /tmp -cJf $OUT/r.tar.xz r
