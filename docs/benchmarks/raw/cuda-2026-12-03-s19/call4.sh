#!/usr/bin/env bash
# session 19, call 4: test_cuda_decode's rotating-cache sampled check on three builds
# (new: the tree; v1: RoPE without the explicit rounding; v2: the norms without it),
# each under the fast and the exact precision; the final tree's q4 figures (the int8
# product's quantizing launch restored) and its kernel and graph tests.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for v in new v1 v2; do
  for p in fast exact; do
    CELER_CUDA_LIB=$PWD/.gpu/$v/libceler-cuda.so CELER_PRECISION=$p timeout 300 $N/tests/cuda/test_cuda_decode > "$O/decode-$v-$p.log" 2>&1
    el "decode $v $p rc=$? $(tail -n 1 $O/decode-$v-$p.log)"; grep "differs" $O/decode-$v-$p.log | cut -c1-220
  done
done
export CELER_CUDA_LIB=
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
timeout 300 $N/tests/cuda/test_cuda_graph > "$O/graph.log" 2>&1; el "graph rc=$? $(tail -n 1 $O/graph.log)"
timeout 300 $N/tests/cuda/test_cuda_batch > "$O/batch.log" 2>&1; el "batch rc=$? $(tail -n 1 $O/batch.log)"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for s in llama3.2-1b gemma3-4b; do timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1; done
for round in 1 2; do
  b l8q4 X=1 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b g3q4 X=1 -m /tmp/gemma3-4b-q4 -p 0 -n 128 -r 3
  b l1q4 X=1 -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 3
done
b l8q4-d4096 X=1 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 128 -r 1 > $O/l8q4-profile.txt 2>&1; el "profile rc=$?"
tar -C /tmp -cJf $OUT/r.tar.xz r
