#!/usr/bin/env bash
# session 21, call 6 (call 4's build): 8-row decode steps on the matrix-vector kernels
# (CUK_MV_BATCH_MAX=8) against cuBLAS (the default 4), llama3-8b bf16 -npl 8 and qwen3-0.6b,
# alternated, three rounds; the batch and graph tests with 8.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s21d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +64' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $9}')"
}
for round in 1 2 3; do
  for m in 4 8; do b l8-npl8-mv$m CUK_MV_BATCH_MAX=$m --synth llama3-8b -npl 8 -p 64 -n 128 -c 32768 -r 1; done
done
for m in 4 8; do b q06-npl8-mv$m CUK_MV_BATCH_MAX=$m --synth qwen3-0.6b -npl 8 -p 64 -n 128 -c 32768 -r 1; done
for t in test_cuda_batch test_cuda_graph; do
  CUK_MV_BATCH_MAX=8 timeout 300 $N/tests/cuda/$t > "$O/$t-mv8.log" 2>&1; el "$t mv8 rc=$? $(tail -n 1 $O/$t-mv8.log)"
done
tar -C /tmp -cJf $OUT/r.tar.xz r
