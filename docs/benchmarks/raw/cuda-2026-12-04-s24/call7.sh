#!/usr/bin/env bash
# session 24, call 7: o's input as float activations (CUK_MV_I8_OWN=0: no quantizing
# launch after the attention) against today's int8 (1): the graph test under both, then
# tg128 of the 4-bit shapes, two rounds, and the attention's cost on the critical path
# (CELER_PROFILE=8, kept) under both.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for v in 1 0; do
  CUK_MV_I8_OWN=$v timeout 300 $N/tests/cuda/test_cuda_graph > "$O/graph-own$v.log" 2>&1; el "test_cuda_graph own=$v rc=$? $(tail -n 1 $O/graph-own$v.log)"
done
CUK_MV_I8_OWN=0 timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision-own0.log 2>&1; el "precision own=0 rc=$? $(tail -n 1 $O/precision-own0.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>> $O/$l.err
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for s in gemma3-4b llama3.2-1b qwen3-0.6b; do timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1; done; el "synth small rc=$?"
for round in 1 2; do
  for v in 1 0; do
    b l8q4-own$v CUK_MV_I8_OWN=$v -m /tmp/l8q4 -p 0 -n 128 -r 3
    b g3q4-own$v CUK_MV_I8_OWN=$v -m /tmp/gemma3-4b-q4 -p 0 -n 128 -r 3
    b l1q4-own$v CUK_MV_I8_OWN=$v -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 3
    b q06q4-own$v CUK_MV_I8_OWN=$v -m /tmp/qwen3-0.6b-q4 -p 0 -n 128 -r 3
  done
done
for v in 1 0; do b l8q4d-own$v CUK_MV_I8_OWN=$v -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
for v in 1 0; do
  b l8q4-own$v-p8 "CUK_MV_I8_OWN=$v CELER_PROFILE=8" -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-own$v-p8attn "CUK_MV_I8_OWN=$v CELER_PROFILE=8 CELER_PROFILE_KEEP=attention" -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-own$v-p2 "CUK_MV_I8_OWN=$v CELER_PROFILE=2" -m /tmp/l8q4 -p 0 -n 128 -r 3
done
tar -C /tmp -cJf $OUT/r.tar.xz r
