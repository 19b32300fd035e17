#!/usr/bin/env bash
# bench/gpu/batched.sh NEW: run on the GPU machine from the repository root after
# unpacking bench/gpu/pack.sh's archive into .gpu/ (NEW/ and lib/). The batched
# decode tests (test_cuda_batch, the batched sampler, the single-session graph and
# pipeline tests, every fixture on the GPU), then `celer bench -npl` on synthesized
# shapes (SHAPES, default qwen3-0.6b llama3-8b): the batched path (graphs, one
# attention op per layer, device sampling) and the old one (CELER_GRAPH=0
# CELER_DEVICE_SAMPLE=0 CELER_DECODE_BATCH=0: op by op, host sampling, attention per
# sequence) in the same call. Logs go to $OUT (tests.log, bench-SHAPE.md).
set -u
NEW=.gpu/$1
# only the settings named below: nothing inherited from the machine's environment
for v in $(env | grep -oE '^(CELER|CUK)_[A-Z0-9_]+'); do [ "$v" = CELER_CUDA_LIB ] || unset "$v"; done
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
env | grep -E '^(CELER|CUK)_' > "$OUT/gpu.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/gpu.txt"
rc=0
NPL=${NPL:-1,8,32,128} PP=${PP:-64} TG=${TG:-128}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for t in "$NEW"/tests/cuda/test_cuda_batch "$NEW/tests/cuda/test_cuda_sample --quick" "$NEW"/tests/cuda/test_cuda_graph \
           "$NEW"/tests/cuda/test_cuda_decode ${SKIP_FIXTURES:+SKIP} "CELER_DEVICE=cuda $NEW/tests/test_fixtures_models"; do
    [ "$t" = SKIP ] && break
    echo "== $t" | tee -a "$OUT/tests.log"
    timeout 240 env $t >> "$OUT/tests.log" 2>&1; r=$?
    grep -E '^(FAIL|@@)|batched|rows:|generation loop' "$OUT/tests.log" | tail -n 12
    [ $r = 0 ] || { echo "FAILED: $t (exit $r)" | tee -a "$OUT/tests.log"; rc=1; }
  done
fi
# MODES: new (the batched path), old (CELER_GRAPH=0 CELER_DEVICE_SAMPLE=0
# CELER_DECODE_BATCH=0), mv4 (new with CUK_MV_BATCH_MAX=4: 8 rows through cuBLAS);
# NPL_<mode> overrides the batch list of one mode
for s in ${SHAPES:-qwen3-0.6b llama3-8b}; do
  d=/tmp/synth-$s
  [ -d "$d" ] || "$NEW/celer" synth --shape "$s" -o "$d" > /dev/null || { echo "synth $s failed"; rc=1; continue; }
  for mode in ${MODES:-new old}; do
    case $mode in
      new) e=CELER_STATS=0 ;;
      old) e="CELER_GRAPH=0 CELER_DEVICE_SAMPLE=0 CELER_DECODE_BATCH=0" ;;
      mv4) e=CUK_MV_BATCH_MAX=4 ;;
    esac
    l=NPL_$mode; l=${!l:-$NPL}
    echo "== $s $mode ($e) -npl $l" | tee -a "$OUT/bench-$s.md"
    timeout ${BENCH_TIMEOUT:-200} env $e "$NEW/celer" bench --device cuda -m "$d" -npl "$l" -p "$PP" -n "$TG" -c 65536 -r 1 \
      -o md 2>&1 | tee -a "$OUT/bench-$s.md"
  done
done
exit $rc
