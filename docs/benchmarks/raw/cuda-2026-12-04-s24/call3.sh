#!/usr/bin/env bash
# session 24, call 3: test_cuda_graph with its new profile_parts test (CELER_PROFILE
# 4-9), then the step taken apart on two small shapes (qwen3-0.6b bf16, llama3.2-1b
# q4), one round.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 300 $N/tests/cuda/test_cuda_graph > "$O/test_cuda_graph.log" 2>&1; el "test_cuda_graph rc=$? $(tail -n 1 $O/test_cuda_graph.log)"
grep -E "CELER_PROFILE|FAIL" $O/test_cuda_graph.log | head -12
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>> $O/$l.err
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 100 $N/celer synth --shape llama3.2-1b --q4 -o /tmp/l1q4 > $O/synth.log 2>&1; el "synth rc=$?"
for m in 0 4 5 6 8 9; do b q06-p$m CELER_PROFILE=$m --synth qwen3-0.6b -p 0 -n 128 -r 3; done
for m in 0 4 5 6 8 9; do b l1q4-p$m CELER_PROFILE=$m -m /tmp/l1q4 -p 0 -n 128 -r 3; done
tar -C /tmp -cJf $OUT/r.tar.xz r
