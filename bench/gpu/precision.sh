#!/usr/bin/env bash
# bench/gpu/precision.sh NEW: run on the GPU machine from the repository root after
# unpacking bench/gpu/pack.sh's archive into .gpu/ (NEW/ and lib/). Synthesizes the
# benchmark shapes in the background, runs the GPU tests (the kernels, the fixtures on
# the exact precision, the fast precision's envelope test, the KV/graph/decode tests,
# the kernel benchmark), then `celer bench` pp512/tg128 with --precision exact and
# fast in the same call (A/B), and llama3-8b with 4,096 tokens in the cache. Logs go
# to $OUT (the test logs as one logs.tar). SHAPES, DEPTH_SHAPES and PRECISIONS choose
# the benchmarks; SKIP_TESTS=1 skips the tests; DIAG=a,b runs the envelope test on
# those fixtures again with CELER_KV_DTYPE=bf16 (a bf16 cache whatever the model).
set -u
NEW=.gpu/$1
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SHAPES=${SHAPES:-"llama3-8b llama3-8b-q4 qwen3-0.6b gemma3-4b"}
DEPTH_SHAPES=${DEPTH_SHAPES:-"llama3-8b"}
synth() {
  for s in $SHAPES; do
    d=/tmp/synth-$s; q=; case $s in *-q4) q=--q4 ;; esac
    [ -d "$d" ] || "$NEW/celer" synth --shape "${s%-q4}" $q -o "$d" > /dev/null || echo "synth $s failed"
  done
}
synth > /tmp/synth.log 2>&1 &
spid=$!
rc=0
t() { # t NAME TIMEOUT COMMAND...: one test, its log, its last lines
  local n=$1 to=$2; shift 2
  echo "== $n"; timeout "$to" env "$@" > "$OUT/$n.log" 2>&1; local r=$?
  tail -n 2 "$OUT/$n.log"; [ $r = 0 ] || { echo "FAILED: $n (exit $r)"; rc=1; }
}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t kernels 180 "$NEW/tests/cuda/test_cuda_kernels"
  t fixtures-exact 180 CELER_DEVICE=cuda "$NEW/tests/test_fixtures_models"
  t precision 240 "$NEW/tests/cuda/test_cuda_precision"
  grep -E '^  |FAIL' "$OUT/precision.log" | head -60
  if [ -n "${DIAG:-}" ]; then
    t precision-kvbf16 240 CELER_KV_DTYPE=bf16 "$NEW/tests/cuda/test_cuda_precision" --only "$DIAG"
    grep -E '^  |FAIL' "$OUT/precision-kvbf16.log" | head -40
  fi
  t kv 120 "$NEW/tests/cuda/test_cuda_kv"
  t graph 180 "$NEW/tests/cuda/test_cuda_graph"
  t decode 180 "$NEW/tests/cuda/test_cuda_decode"
  t kernels-bench 120 "$NEW/tests/cuda/test_cuda_kernels" --bench-only
  grep -E 'attention|gemm|Gemm' "$OUT/kernels-bench.log"
  (cd "$OUT" && tar -cf logs.tar *.log && rm -f *.log)
fi
wait $spid
cat /tmp/synth.log
for s in $SHAPES; do
  for p in ${PRECISIONS:-exact fast}; do
    echo "== $s $p"
    "$NEW/celer" bench --device cuda --precision $p -m /tmp/synth-$s -p 512 -n 128 -r 2 -o md 2>&1 | grep -E '^\||^cuda:' | tee -a "$OUT/bench-$s.md"
  done
done
for s in $DEPTH_SHAPES; do
  for p in ${PRECISIONS:-exact fast}; do
    echo "== $s $p depth 4096"
    "$NEW/celer" bench --device cuda --precision $p -m /tmp/synth-$s -d 4096 -p 512 -n 128 -r 2 -o md 2>&1 | grep -E '^\||^cuda:' | tee -a "$OUT/bench-$s-d4096.md"
  done
done
exit $rc
