#!/usr/bin/env bash
# bench/gpu/skinny.sh NEW: the tensor-core decode product (skinny.cu) on the H200 in one
# call, from the repository root after unpacking bench/gpu/pack.sh's archive into .gpu/:
#   1. test_cuda_kernels --bench (the kernel tests, then matvec / cuBLAS / skinny GB/s
#      at T = 1-32 beside a measured copy);
#   2. the GPU tests with it on (CUK_SKINNY=1: batches, graphs, decode, precision,
#      the fixtures through CUDA);
#   3. `celer bench -npl` with CUK_SKINNY=1 and 0 interleaved (A/B, same binary), and
#      single-stream pp512/tg128 with the kernel from 1 row (CUK_SKINNY_MIN_T=1) or not.
# Logs in $OUT: kernels.log, tests.log, npl.md, single.md.
set -u
NEW=.gpu/$1
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
timeout 300 "$NEW/tests/cuda/test_cuda_kernels" --bench > "$OUT/kernels.log" 2>&1 || { echo "FAILED: kernels"; rc=1; }
grep -E "passed|failed|FAIL" "$OUT/kernels.log" | tail -3
for t in "$NEW"/tests/cuda/test_cuda_batch "$NEW"/tests/cuda/test_cuda_graph "$NEW"/tests/cuda/test_cuda_decode \
         "$NEW"/tests/cuda/test_cuda_precision "CELER_DEVICE=cuda $NEW/tests/test_fixtures_models"; do
  echo "== $t" >> "$OUT/tests.log"; timeout 240 env CUK_SKINNY=1 $t >> "$OUT/tests.log" 2>&1; r=$?
  echo "$t: $(tail -n 1 "$OUT/tests.log")"; [ $r = 0 ] || { echo "FAILED: $t (exit $r)" | tee -a "$OUT/tests.log"; rc=1; }
done
for s in ${SHAPES:-llama3-8b qwen3-0.6b}; do
  for sk in 1 0 1 0; do
    echo "== $s CUK_SKINNY=$sk" >> "$OUT/npl.md"
    CUK_SKINNY=$sk timeout 150 "$NEW/celer" bench --device cuda --synth "$s" -npl ${NPL:-1,8,16,32} -p 64 -n 128 -c 65536 -r 1 -o md 2>&1 |
      grep -E '^\||^cuda:|rror' >> "$OUT/npl.md" || rc=1
  done
done
for m in 1 5 1 5; do
  echo "== llama3-8b CUK_SKINNY_MIN_T=$m" >> "$OUT/single.md"
  CUK_SKINNY=1 CUK_SKINNY_MIN_T=$m timeout 120 "$NEW/celer" bench --device cuda --synth llama3-8b -p 512 -n 128 -r 3 -o md 2>&1 |
    grep -E '^\||^cuda:|rror' >> "$OUT/single.md" || rc=1
done
exit $rc
