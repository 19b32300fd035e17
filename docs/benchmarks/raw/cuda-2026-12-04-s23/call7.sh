#!/usr/bin/env bash
# session 23, call 7: the tensor-core batched attention on the other shapes of the KV
# record (gemma4-e4b: 256-wide sliding and 512-wide global heads, shared KV layers;
# gemma4-12b; exaone4-1.2b: 64-wide heads), A/B by CUK_ATTN_BATCH_MMA_MIN_KEYS
# (1000000: CUDA cores, 0: tensor cores, the default), 8 and 32 sequences, and 32 with
# 2,048-token prompts (past the sliding windows).
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s23g.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +[0-9]' $O/$l.md | tail -n ${ROWS:-2} | awk -F'|' '{printf "%s ", $9}')"
}
for s in gemma4-e4b exaone4-1.2b gemma4-12b; do
  for k in 1000000 0; do
    b $s-npl-k$k CUK_ATTN_BATCH_MMA_MIN_KEYS=$k --synth $s -npl 8,32 -p 64 -n 128 -c 32768 -r 1
    ROWS=1 b $s-long-k$k CUK_ATTN_BATCH_MMA_MIN_KEYS=$k --synth $s -npl 32 -p 2048 -n 64 -c 80000 -r 1
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
