#!/usr/bin/env bash
# session 12, call 5: flash-attention decode splits (CUK_FA_SPLIT_KEYS: the fewest keys a
# split takes; 128 today) at 32 / 64 / 128: GPU tests at 32, then interleaved tg128 of
# llama3-8b (depth 0 and 4,096), gemma3-4b and qwen3-0.6b, three rounds.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s12d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
for t in "CUK_FA_SPLIT_KEYS=32 $N/tests/cuda/test_cuda_graph" "CUK_FA_SPLIT_KEYS=32 $N/tests/cuda/test_cuda_kernels" \
         "CUK_FA_SPLIT_KEYS=32 $N/tests/cuda/test_cuda_precision" "CUK_FA_SPLIT_KEYS=32 CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures" \
         "CUK_FA_SPLIT_KEYS=32 $N/tests/cuda/test_cuda_batch"; do
  f=$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_' | tail -c 60)
  timeout 200 env $t > "$O/$f.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$f.log" | head -n 6
done
tg() { # $1 label, rest: args
  local l=$1; shift
  timeout 100 $C bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l rc=$? $(grep -E '^\| [a-z]' $O/$l.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
}
for round in 1 2 3; do
  for k in 128 32 64; do
    CUK_FA_SPLIT_KEYS=$k tg l8-k$k --synth llama3-8b -p 0 -n 128 -r 2
    CUK_FA_SPLIT_KEYS=$k tg g3-k$k --synth gemma3-4b -p 0 -n 128 -r 2
    CUK_FA_SPLIT_KEYS=$k tg d4k-k$k --synth llama3-8b -p 0 -n 128 -d 4096 -r 1
    CUK_FA_SPLIT_KEYS=$k tg q06-k$k --synth qwen3-0.6b -p 0 -n 128 -r 2
  done
done
tar -C /tmp -cJf $R/r.tar.xz r
