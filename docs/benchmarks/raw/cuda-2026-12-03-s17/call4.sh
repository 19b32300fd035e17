#!/usr/bin/env bash
# session 17, call 4: one-query attention over a bf16 cache, flash (tensor cores) against
# the CUDA-core kernel by the cache's key bound (CUK_ATTN_MMA_MIN_KEYS: 0 = always flash,
# the previous default; 1048576 = never; 1024 = the new default), tg128 at depths 0, 512,
# 1,024 and 2,048 for llama3-8b bf16 and q4 and gemma3-4b bf16. Tests first.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s17d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for d in 0 512 1024 2048; do
  for k in 1024 0 1048576; do
    b l8q4-d$d-k$k CUK_ATTN_MMA_MIN_KEYS=$k -m /tmp/l8q4 -p 0 -n 128 -r 2 -d $d
    b l8-bf16-d$d-k$k CUK_ATTN_MMA_MIN_KEYS=$k --synth llama3-8b -p 0 -n 128 -r 2 -d $d
    b g3-bf16-d$d-k$k CUK_ATTN_MMA_MIN_KEYS=$k --synth gemma3-4b -p 0 -n 128 -r 2 -d $d
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
