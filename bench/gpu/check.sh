#!/usr/bin/env bash
# bench/gpu/check.sh NEW [BASE]: run on the GPU machine from the repository root after
# unpacking bench/gpu/pack.sh's archive into .gpu/ (which holds NEW/ and BASE/ builds
# and lib/). Runs the GPU tests of NEW (`make test-cuda`'s list), then celer bench
# pp512/tg128 on synthesized qwen3-0.6b, gemma3-4b and llama3-8b shapes, NEW and BASE
# interleaved in the same call (A/B). Logs go to $OUT. CELER_STATS=1 adds the
# backend's counters (graph launches, captures, kernels per forward) to each bench.
set -u
NEW=.gpu/$1; BASE=${2:+.gpu/$2}
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # `make test-cuda`'s list, and the snapshot fixtures on the GPU
  for t in "$NEW"/tests/cuda/test_cuda_kernels "$NEW"/tests/cuda/test_cuda_sample "CELER_DEVICE=cuda $NEW/tests/test_fixtures_models" \
           "$NEW"/tests/cuda/test_cuda_precision "$NEW"/tests/cuda/test_cuda_kv "$NEW"/tests/cuda/test_cuda_graph \
           "$NEW"/tests/cuda/test_cuda_decode "$NEW"/tests/cuda/test_cuda_batch "CELER_DEVICE=cuda $NEW/tests/test_snapshot_fixtures"; do
    [ -x "${t##* }" ] || { echo "== $t: not packed, skipped"; continue; }
    echo "== $t"; env $t > "$OUT/$(basename "${t##* }").log" 2>&1; r=$?
    tail -n 3 "$OUT/$(basename "${t##* }").log"; [ $r = 0 ] || { echo "FAILED: $t (exit $r)"; rc=1; }
  done
fi
[ -n "${SHAPES:-}" ] || SHAPES="qwen3-0.6b gemma3-4b llama3-8b"
for s in $SHAPES; do
  # SHAPE-q4: the shape's MLX q4 checkpoint (celer synth --q4)
  d=/tmp/synth-$s; q=; case $s in *-q4) q=--q4 ;; esac
  [ -d "$d" ] || "$NEW/celer" synth --shape "${s%-q4}" $q -o "$d" > /dev/null || { echo "synth $s failed"; rc=1; continue; }
  for rep in 1 2; do
    for b in "$NEW" ${BASE:+"$BASE"}; do
      echo "== $s $b rep $rep"
      "$b/celer" bench --device cuda -m "$d" -p 512 -n 128 -r 3 -o md 2>&1 | grep -E '^\||^cuda:' | tee -a "$OUT/bench-$s.md"
    done
  done
done
exit $rc
