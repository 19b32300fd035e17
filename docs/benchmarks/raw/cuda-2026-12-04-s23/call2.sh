#!/usr/bin/env bash
# session 23, call 2: the tensor-core batched attention now the default
# (CUK_ATTN_BATCH_MMA_MIN_KEYS=0) and a batched step's q|k|v split folded into the q/k
# norm + RoPE + KV write kernel (CUK_SPLIT_ROPE_PUT). Every GPU test; the split fold
# A/B (1 / 0) alternated at 8 and 32 sequences of llama3-8b bf16, three rounds; then the
# final rows: llama3-8b 1, 8, 32, 128 sequences, gemma3-4b 32, qwen3-0.6b 32 and 128,
# one-sequence tg128 of llama3-8b (unchanged path, a sanity row).
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s23b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 120 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
CUK_SPLIT_ROPE_PUT=0 timeout 300 $N/tests/cuda/test_cuda_batch > "$O/batch-split0.log" 2>&1; el "batch (split apart) rc=$? $(tail -n 1 $O/batch-split0.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +[0-9]' $O/$l.md | tail -n ${ROWS:-2} | awk -F'|' '{printf "%s ", $9}')"
}
for round in 1 2 3; do
  for k in 1 0; do
    b l8-npl-split$k CUK_SPLIT_ROPE_PUT=$k --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
  done
done
ROWS=4 b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
ROWS=4 b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
ROWS=1 b g3-npl X=1 --synth gemma3-4b -npl 32 -p 64 -n 128 -c 16384 -r 1
b q06-npl X=1 --synth qwen3-0.6b -npl 32,128 -p 64 -n 128 -c 32768 -r 1
b l8-long X=1 --synth llama3-8b -npl 8,32 -p 2048 -n 64 -c 80000 -r 1
timeout 120 $N/celer bench --device cuda --synth llama3-8b -p 512 -n 128 -r 3 -o md > $O/l8.md 2>&1; el "l8 rc=$? $(grep -E '^\| *[a-z0-9]' $O/l8.md | tail -n 2 | awk -F'|' '{printf "%s ", $(NF-1)}')"
tar -C /tmp -cJf $OUT/r.tar.xz r
