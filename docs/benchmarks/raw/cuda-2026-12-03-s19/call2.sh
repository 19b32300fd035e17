#!/usr/bin/env bash
# session 19, call 2: the q/k norm + RoPE kernel writing the step's KV rows itself
# (cuk_qk_norm_rope_put; CUK_ROPE_PUT=0 keeps the separate put, experiment knob)
# against the two launches; the one-query attention at 16 warps a block
# (CUK_ATTN_WARPS=16) against the default 8; the int8 q4 product on products of any
# row count with 2,048+ columns (CUK_I8_MINROWS=0, experiment knob) against 4,096+
# rows; every GPU test first (the kernel test has the new bit-for-bit checks).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL|test_cuda" $O/kernels.log | head -8
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
CUK_ROPE_PUT=0 timeout 300 $N/tests/cuda/test_cuda_graph > "$O/graph-rp0.log" 2>&1; el "graph rp0 rc=$? $(tail -n 1 $O/graph-rp0.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2; do
  for m in 0 1; do b l8q4-rp$m CUK_ROPE_PUT=$m -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for m in 0 1; do b l8-rp$m CUK_ROPE_PUT=$m --synth llama3-8b -p 0 -n 128 -r 3; done
  for m in 0 1; do b g3-rp$m CUK_ROPE_PUT=$m --synth gemma3-4b -p 0 -n 128 -r 3; done
done
for m in 0 1; do b q06-rp$m CUK_ROPE_PUT=$m --synth qwen3-0.6b -p 0 -n 128 -r 3; done
for m in 0 1; do b l8-npl-rp$m CUK_ROPE_PUT=$m --synth llama3-8b -npl 1,8,32 -p 64 -n 128 -c 16384 -r 1; done
for round in 1 2; do
  for w in 8 16; do b l8q4-w$w CUK_ATTN_WARPS=$w -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
for w in 8 16; do b l8-d4096-w$w CUK_ATTN_WARPS=$w --synth llama3-8b -p 0 -n 128 -r 2 -d 4096; done
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 128 -r 1 > $O/l8q4-profile.txt 2>&1; el "profile rc=$?"
for s in qwen3-0.6b llama3.2-1b gemma3-4b; do
  timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1
  for r in 1 2; do for m in 4096 0; do b $s-q4-mr$m CUK_I8_MINROWS=$m -m /tmp/$s-q4 -p 0 -n 128 -r 3; done; done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
