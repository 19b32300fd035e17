#!/usr/bin/env bash
# session 15, call 5 (call 4's A/B folded in): three builds in one call. base = the
# session's start (bf33f3f); q = the quantized-product work (c78f680: dequant.cu, the
# split k walk, the rule); att = q plus the batched decode attention reducing a batch of
# keys' scores together (warp_sum_many) with one softmax rescale per batch. GPU tests on
# att; then, interleaved, two rounds: llama3-8b q4 (pp512/tg128, -npl 8,32) and
# gpt-oss-20b pp512 on base and q; llama3-8b bf16 (tg128, -npl 8,32,128) and gemma3-4b
# -npl 32 on base, q and att.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/att
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for t in test_cuda_kernels test_cuda_batch test_cuda_graph test_cuda_decode test_cuda_qgemm test_cuda_kv test_cuda_sample; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
  grep FAIL $O/$t.log | head -5
done
timeout 100 $N/tests/cuda/test_cuda_qgemm_broken > $O/qgemm-broken.log 2>&1; el "qgemm broken rc=$? $(tail -n 1 $O/qgemm-broken.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
timeout 150 $N/celer synth --shape gpt-oss-20b --q4 -o /tmp/goss >> $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, build, args
  local l=$1 a=$2; shift 2
  timeout 150 .gpu/$a/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  el "$l $a rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l-$a.md | tail -n 3 | awk -F'|' '{printf "%s ", ($3 ~ /[0-9]/ ? $(NF-3) : $(NF-1))}')"
}
for round in 1 2; do
  for a in base q att; do
    [ $(( $(date +%s) - t0 )) -gt 500 ] && break 2
    b l8 $a --synth llama3-8b -p 0 -n 128 -r 2
    b l8-npl $a --synth llama3-8b -npl 8,32,128 -p 64 -n 128 -r 1
    b g3-npl $a --synth gemma3-4b -npl 32 -p 64 -n 128 -r 1
    [ $a = att ] && continue
    b l8q4 $a -m /tmp/l8q4 -p 512 -n 128 -r 2
    b l8q4-npl $a -m /tmp/l8q4 -npl 8,32 -p 64 -n 128 -r 1
    b goss $a -m /tmp/goss -p 512 -n 0 -r 2
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
