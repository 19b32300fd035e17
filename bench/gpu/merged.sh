#!/usr/bin/env bash
# bench/gpu/merged.sh NEW: the merged tree's GPU check and its headline figures in one
# call on the H200, run from the repository root after unpacking bench/gpu/pack.sh's
# archive into .gpu/ (NEW/ and lib/), test_tp and test_cuda_qgemm included:
#   1. every GPU test of `make test-cuda`, the fixtures through CUDA, and the fixtures
#      at --tp 1 through NCCL (one rank);
#   2. `celer bench --synth` (weights made in GPU memory) for llama3-8b and qwen3-0.6b,
#      fast and exact in turn, at depth 0 and (llama3-8b) 4,096; llama3-8b q4 and
#      qwen3-0.6b q4 from `celer synth --q4` checkpoints;
#   3. `celer bench -npl 1,8,32,128` on llama3-8b (pipelined batched decode).
# Logs in $OUT: one per test, bench.md, npl.md. QUICK=1 runs the fast precision only and
# no q4 checkpoints.
set -u
NEW=.gpu/$1
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
for t in "$NEW"/tests/cuda/test_cuda_kernels "$NEW"/tests/cuda/test_cuda_sample "$NEW"/tests/cuda/test_cuda_qgemm \
         "CELER_DEVICE=cuda $NEW/tests/test_fixtures_models" "$NEW"/tests/cuda/test_cuda_precision "$NEW"/tests/cuda/test_cuda_kv \
         "$NEW"/tests/cuda/test_cuda_graph "$NEW"/tests/cuda/test_cuda_decode "$NEW"/tests/cuda/test_cuda_batch \
         "CELER_DEVICE=cuda $NEW/tests/test_snapshot_fixtures" "CELER_DEVICE=cuda $NEW/tests/test_tp 1"; do
  bin=${t#CELER_DEVICE=cuda }; bin=${bin%% *}
  [ -x "$bin" ] || { echo "== $t: not packed, skipped"; rc=1; continue; }
  log="$OUT/tests.log"
  echo "== $t" | tee -a "$log"; timeout "${TEST_TIMEOUT:-240}" env $t >> "$log" 2>&1; r=$?
  tail -n 1 "$log"; [ $r = 0 ] || { echo "FAILED: $t (exit $r)" | tee -a "$log"; rc=1; }
done
B="$NEW/celer bench --device cuda -r 3 -o md -p 512 -n 128"
run() { echo "== $*" >> "$OUT/bench.md"; timeout 120 "$@" 2>&1 | grep -E '^\||^cuda:|rror' >> "$OUT/bench.md" || { echo "FAILED: $*" | tee -a "$OUT/bench.md"; rc=1; }; }
# QUICK=1: the fast precision only, no q4 checkpoints (a call with little device time left)
precs="fast exact"; [ "${QUICK:-0}" = 1 ] && precs=fast
for p in $precs; do
  run $B --synth llama3-8b --precision $p
  run $B --synth llama3-8b --precision $p -d 4096
  run $B --synth qwen3-0.6b --precision $p
done
for s in llama3-8b qwen3-0.6b; do
  [ "${QUICK:-0}" = 1 ] && break
  "$NEW/celer" synth --shape $s --q4 -o /tmp/synth-$s-q4 > /dev/null || { echo "synth $s q4 failed"; rc=1; continue; }
  run $B -m /tmp/synth-$s-q4
done
echo "== npl" >> "$OUT/npl.md"
timeout 200 "$NEW/celer" bench --device cuda --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1 -o md >> "$OUT/npl.md" 2>&1 || { echo "FAILED: npl"; rc=1; }
cat "$OUT/bench.md" "$OUT/npl.md"
exit $rc
