#!/usr/bin/env bash
# session 17, call 3: kernel_mv_q4g_i8 (the register kernel of call 1) as the default on
# products of 4,096+ rows and 2,048+ columns; the decode attention over a bf16 cache
# (flash attention on tensor cores, the default) against the CUDA-core kernels
# (CUK_ATTN_NO_MMA=1) and an f32 cache (CELER_KV_DTYPE=f32), one sequence, at an empty
# cache and at depth 4,096. Tests first. (Archive s17c.tar.xz.)
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s17c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  b l8q4-i8 CUK_MV_I8X2=1 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-float CUK_MV_I8X2=0 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-i8-nomma CUK_ATTN_NO_MMA=1 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-i8-kvf32 CELER_KV_DTYPE=f32 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8-bf16 CUK_MV_I8X2=1 --synth llama3-8b -p 0 -n 128 -r 3
  b l8-bf16-nomma CUK_ATTN_NO_MMA=1 --synth llama3-8b -p 0 -n 128 -r 3
  b l8-bf16-kvf32 CELER_KV_DTYPE=f32 --synth llama3-8b -p 0 -n 128 -r 3
  b g3-bf16 CUK_MV_I8X2=1 --synth gemma3-4b -p 0 -n 128 -r 3
  b g3-bf16-nomma CUK_ATTN_NO_MMA=1 --synth gemma3-4b -p 0 -n 128 -r 3
  b g3-bf16-kvf32 CELER_KV_DTYPE=f32 --synth gemma3-4b -p 0 -n 128 -r 3
done
b l8q4-i8-d4096 CUK_MV_I8X2=1 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
b l8q4-i8-nomma-d4096 CUK_ATTN_NO_MMA=1 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
b l8-bf16-d4096 CUK_MV_I8X2=1 --synth llama3-8b -p 0 -n 128 -r 2 -d 4096
b l8-bf16-nomma-d4096 CUK_ATTN_NO_MMA=1 --synth llama3-8b -p 0 -n 128 -r 2 -d 4096
for s in qwen3-0.6b gemma3-4b; do
  timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 > /dev/null 2>&1
  b $s-q4-i8 CUK_MV_I8X2=1 -m /tmp/$s-q4 -p 0 -n 128 -r 3
  b $s-q4-float CUK_MV_I8X2=0 -m /tmp/$s-q4 -p 0 -n 128 -r 3
done
tar -C /tmp -cJf $OUT/r.tar.xz r
