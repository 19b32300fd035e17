#!/usr/bin/env bash
# session 23, call 1: batched decode attention on the tensor cores (the lean
# flash-decoding tile, one block per sequence, KV head and key split:
# kernel_flash_decode_batch). Every GPU test (the kernel test runs the batched
# attention cases on both kernels; test_cuda_batch also with every batched step on the
# tensor cores), then llama3-8b bf16 batches A/B by CUK_ATTN_BATCH_MMA_MIN_KEYS
# (1000000: the CUDA-core kernel always, as before; -1: the tensor cores always),
# alternated, at short and long prompts; gemma3-4b and qwen3-0.6b at 32 / 128.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s23a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 120 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm test_cuda_sample; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
CUK_ATTN_BATCH_MMA_MIN_KEYS=-1 timeout 300 $N/tests/cuda/test_cuda_batch > "$O/batch-mma.log" 2>&1; el "batch (tensor cores) rc=$? $(tail -n 1 $O/batch-mma.log)"
CUK_ATTN_BATCH_MMA_MIN_KEYS=-1 timeout 300 $N/tests/cuda/test_cuda_kv > "$O/kv-mma.log" 2>&1; el "kv (tensor cores) rc=$? $(tail -n 1 $O/kv-mma.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +[0-9]' $O/$l.md | tail -n ${ROWS:-2} | awk -F'|' '{printf "%s ", $9}')"
}
for round in 1 2; do
  for k in 1000000 -1; do
    b l8-npl-k$k CUK_ATTN_BATCH_MMA_MIN_KEYS=$k --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
  done
done
for k in 1000000 -1; do
  b l8-long-k$k CUK_ATTN_BATCH_MMA_MIN_KEYS=$k --synth llama3-8b -npl 8,32 -p 2048 -n 64 -c 80000 -r 1
  b g3-npl-k$k CUK_ATTN_BATCH_MMA_MIN_KEYS=$k --synth gemma3-4b -npl 32 -p 64 -n 128 -c 16384 -r 1
  b q06-npl-k$k CUK_ATTN_BATCH_MMA_MIN_KEYS=$k --synth qwen3-0.6b -npl 32,128 -p 64 -n 128 -c 32768 -r 1
done
ROWS=4 b l8-npl-default X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
tar -C /tmp -cJf $OUT/r.tar.xz r
