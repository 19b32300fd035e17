#!/usr/bin/env bash
# session 14, call 2: the batched decode attention with keys across lanes
# (CUK_ATTN_LANES=1, attention_batch.cu) against the key-a-warp kernel (0), and the
# launch order chosen per graph (CELER_PDL_LATE=auto) against early (0) for batches.
# GPU tests first; then llama3-8b -npl 1,8,32,128 and qwen3-0.6b / gemma3-4b -npl
# 8,32, arms interleaved, two rounds.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s14b.tar.xz || exit 9 # pack: bench/gpu/pack.sh .gpu/s14b.tar.xz new
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
for t in test_cuda_kernels test_cuda_batch test_cuda_graph test_cuda_kv test_cuda_decode; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$t.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$t.log" | head -n 8
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
nb() { # label, env assignments..., then -- bench args
  local l=$1; shift; local e=(); while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
  env "${e[@]}" timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l rc=$? $(grep -E '^\| *[0-9]' $O/$l.md | tail -n 4 | awk -F'|' '{printf "%s/%s ", $(NF-3), $(NF-1)}')"
}
for round in 1 2; do
  [ $(( $(date +%s) - t0 )) -gt 450 ] && break
  nb l8-lanes CUK_ATTN_LANES=1 -- --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1
  nb l8-warp CUK_ATTN_LANES=0 -- --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1
  nb l8-early CELER_PDL_LATE=0 -- --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 65536 -r 1
  nb g3-lanes CUK_ATTN_LANES=1 -- --synth gemma3-4b -npl 8,32 -p 64 -n 128 -c 65536 -r 1
  nb g3-warp CUK_ATTN_LANES=0 -- --synth gemma3-4b -npl 8,32 -p 64 -n 128 -c 65536 -r 1
  nb q06-lanes CUK_ATTN_LANES=1 -- --synth qwen3-0.6b -npl 32,128 -p 64 -n 128 -c 65536 -r 1
  nb q06-warp CUK_ATTN_LANES=0 -- --synth qwen3-0.6b -npl 32,128 -p 64 -n 128 -c 65536 -r 1
done
tar -C /tmp -cJf $R/r.tar.xz r
