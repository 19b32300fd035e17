#!/usr/bin/env bash
# session 21, call 5 (the build of call 4): with the lean flash-decoding kernel the
# default, should one query over a short cache (<= 256 keys) take it too instead of the
# CUDA-core kernel? CUK_ATTN_MMA_MIN_KEYS=0 against the default 256 on tg128 at depth 0
# (llama3-8b bf16 and q4, gemma3-4b, qwen3-0.6b, llama3.2-1b), alternated, two rounds
# on llama3-8b and gemma3-4b; and gemma3-4b with CUK_MV_ROWS=2 (two rows a warp on
# every 16-bit one-row product) against the measured default.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s21d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
timeout 100 $N/celer synth --shape llama3.2-1b -o /tmp/l1 >> $O/synth.log 2>&1
for round in 1 2; do
  for k in 256 0; do b l8-mk$k CUK_ATTN_MMA_MIN_KEYS=$k --synth llama3-8b -p 0 -n 128 -r 3; done
  for k in 256 0; do b g3-mk$k CUK_ATTN_MMA_MIN_KEYS=$k --synth gemma3-4b -p 0 -n 128 -r 3; done
done
for k in 256 0; do b l8q4-mk$k CUK_ATTN_MMA_MIN_KEYS=$k -m /tmp/l8q4 -p 0 -n 128 -r 3; done
for k in 256 0; do b q06-mk$k CUK_ATTN_MMA_MIN_KEYS=$k --synth qwen3-0.6b -p 0 -n 128 -r 3; done
for k in 256 0; do b l1-mk$k CUK_ATTN_MMA_MIN_KEYS=$k -m /tmp/l1 -p 0 -n 128 -r 3; done
for r in 0 2 0 2; do b g3-rows$r CUK_MV_ROWS=$r --synth gemma3-4b -p 0 -n 128 -r 3; done
tar -C /tmp -cJf $OUT/r.tar.xz r
