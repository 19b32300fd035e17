#!/usr/bin/env bash
# session 23, call 5: the lean flash-decoding kernels (one sequence and batches) issue
# their first pass's key and value copies before their dependency wait and copy this
# forward's rows again after it (CUK_ATTN_EARLY). Every GPU test, the batch and decode
# tests three times each (a race would show as a stale row); the A/B (1 / 0)
# alternated: llama3-8b bf16 at 8 and 32 sequences (three rounds), one sequence at
# 4,096 tokens of depth (two rounds), 32 sequences with 2,048-token prompts (two);
# then the server under load on this tree (bench/gpu/pipeline.sh's serve part: 32
# streaming clients, 548-token prompts, 128 tokens; the same work through bench).
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s23e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 120 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
for i in 1 2 3; do
  for t in test_cuda_decode test_cuda_batch; do
    timeout 300 $N/tests/cuda/$t > "$O/$t-$i.log" 2>&1; el "$t ($i) rc=$? $(tail -n 1 $O/$t-$i.log)"
  done
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +[0-9]' $O/$l.md | tail -n ${ROWS:-2} | awk -F'|' '{printf "%s ", $9}')"
}
t() { # label, env, args: one-sequence rows
  local l=$1 e=$2; shift 2
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2 3; do
  for k in 1 0; do
    b l8-npl-early$k CUK_ATTN_EARLY=$k --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
  done
done
for round in 1 2; do
  for k in 1 0; do
    t l8-d4096-early$k CUK_ATTN_EARLY=$k --synth llama3-8b -p 0 -n 128 -r 3 -d 4096
    ROWS=1 b l8-long-early$k CUK_ATTN_EARLY=$k --synth llama3-8b -npl 32 -p 2048 -n 64 -c 80000 -r 1
  done
done
ROWS=4 b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
[ -d /tmp/synth-llama3-8b ] || timeout 240 $N/celer synth --shape llama3-8b -o /tmp/synth-llama3-8b > $O/synth.log 2>&1; el "synth rc=$?"
SKIP_TESTS=1 SHAPES=" " SERVE_MODES=pipe OUT=$O/serve timeout 400 bash bench/gpu/pipeline.sh new > $O/serve-console.txt 2>&1; el "serve rc=$? $(tail -n 4 $O/serve-console.txt | tr '\n' ' ')"
tar -C /tmp -cJf $OUT/r.tar.xz r
