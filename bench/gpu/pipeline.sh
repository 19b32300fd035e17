#!/usr/bin/env bash
# bench/gpu/pipeline.sh NEW: the pipelined batched decode loop on the GPU machine, run
# from the repository root after unpacking bench/gpu/pack.sh's archive into .gpu/
# (NEW/ and lib/), with a loadgen binary (tests/server/loadgen.c built here) in .gpu/.
#   1. test_cuda_batch (batched = alone, graphs = op by op, pipelined = unpipelined);
#   2. `celer bench -npl` on synthesized shapes (SHAPES), pipelined and not
#      (CELER_BATCH_PIPELINE=1/0) and, with MODES, the op-by-op path before batching
#      (old: CELER_DECODE_BATCH=0 CELER_GRAPH=0 CELER_DEVICE_SAMPLE=0), same binary;
#   3. the server under load (SERVE_SHAPE, default llama3-8b): `celer serve -np 32`
#      and loadgen with 32 streaming clients, 512-word prompts (the llama3 tokenizer:
#      about 512 tokens), 128 tokens each, pipelined and not; then `celer bench -npl
#      32 -p 512 -n 128`, the same work without HTTP, for the ratio.
# Logs go to $OUT: tests.log, bench-SHAPE.md, serve.jsonl, serve-MODE.log, bench512.md.
set -u
NEW=.gpu/$1
for v in $(env | grep -oE '^(CELER|CUK)_[A-Z0-9_]+'); do [ "$v" = CELER_CUDA_LIB ] || unset "$v"; done
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  el test_cuda_batch
  timeout "${TEST_TIMEOUT:-150}" "$NEW/tests/cuda/test_cuda_batch" > "$OUT/tests.log" 2>&1; r=$?
  grep -E '^(FAIL|@@)|pipelined|differ|stopped|wrong' "$OUT/tests.log" | tail -n 24
  [ $r = 0 ] || { echo "FAILED: test_cuda_batch (exit $r)"; rc=1; }
fi
for s in ${SHAPES:-qwen3-0.6b llama3-8b}; do
  d=/tmp/synth-$s
  [ -d "$d" ] || timeout 240 "$NEW/celer" synth --shape "$s" -o "$d" > /dev/null || { echo "synth $s failed"; rc=1; continue; }
  el "synth $s"
  for mode in pipe nopipe ${MODES:-}; do
    case $mode in
      pipe) e=CELER_BATCH_PIPELINE=1 ;;
      nopipe) e=CELER_BATCH_PIPELINE=0 ;;
      old) e="CELER_DECODE_BATCH=0 CELER_GRAPH=0 CELER_DEVICE_SAMPLE=0" ;;
    esac
    l=NPL_$mode; l=${!l:-${NPL:-1,8,32,128}}
    echo "== $s $mode ($e) -npl $l" >> "$OUT/bench-$s.md"
    timeout "${BENCH_TIMEOUT:-100}" env $e "$NEW/celer" bench --device cuda -m "$d" -npl "$l" -p 64 -n 128 -c 65536 \
      -r 1 -o md >> "$OUT/bench-$s.md" 2>&1
    el "bench $s $mode"; grep -E '^\|' "$OUT/bench-$s.md" | tail -n 4
  done
done
[ "${SKIP_SERVE:-0}" = 1 ] && exit $rc
d=/tmp/synth-${SERVE_SHAPE:-llama3-8b}
tk=/tmp/tok-llama3
mkdir -p "$tk" && xz -dc tests/fixtures/tokenizers/llama3/tokenizer.json.xz > "$tk/tokenizer.json" &&
  cp tests/fixtures/tokenizers/llama3/tokenizer_config.json "$tk/"
for mode in ${SERVE_MODES:-pipe nopipe}; do
  case $mode in pipe) e=CELER_BATCH_PIPELINE=1 ;; nopipe) e=CELER_BATCH_PIPELINE=0 ;; esac
  env $e "$NEW/celer" serve -m "$d" --tokenizer "$tk" --device cuda --port 0 -np 32 -c 1024 > "$OUT/serve-$mode.log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$OUT/serve-$mode.log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && grep -q ' ready ' "$OUT/serve-$mode.log" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.2
  done
  el "serve $mode on port $port"
  if [ -n "$port" ]; then
    timeout 30 .gpu/loadgen "$port" 4 8 16 512 > /dev/null   # warm-up: graphs, cuBLAS, the allocator
    timeout "${LOAD_TIMEOUT:-90}" .gpu/loadgen "$port" 32 "${REQS:-96}" 128 512 | sed "s/^{/{\"mode\":\"$mode\",/" |
      tee -a "$OUT/serve.jsonl"
  else
    echo "serve $mode did not start"; rc=1
  fi
  kill $pid; wait $pid 2>/dev/null
  el "serve $mode done"
done
timeout "${BENCH_TIMEOUT:-100}" "$NEW/celer" bench --device cuda -m "$d" -npl 32 -p 512 -n 128 -c 65536 -r 1 -o md \
  > "$OUT/bench512.md" 2>&1
el "bench 512"; grep -E '^\|' "$OUT/bench512.md" | tail -n 2
exit $rc
