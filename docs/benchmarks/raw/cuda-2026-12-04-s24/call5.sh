#!/usr/bin/env bash
# session 24, call 5: the final tree (CELER_PROFILE_KEEP; test_cuda_graph's cases share
# one token helper): the kernel and graph tests, then each small kernel kind's cost on
# the critical path (CELER_PROFILE=8 with that kind kept) on llama3-8b q4, gemma3-4b
# bf16 and llama3-8b bf16, two rounds, beside the whole step and mode 8 alone.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 120 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
timeout 300 $N/tests/cuda/test_cuda_graph > "$O/test_cuda_graph.log" 2>&1; el "test_cuda_graph rc=$? $(tail -n 1 $O/test_cuda_graph.log)"
grep -E "  CELER_PROFILE|FAIL|steps:" $O/test_cuda_graph.log | head -16
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>> $O/$l.err
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2; do
  for m in whole none add_rmsnorm qk_norm_rope attention glu; do
    case $m in whole) e="CELER_PROFILE=0" ;; none) e="CELER_PROFILE=8" ;; *) e="CELER_PROFILE=8 CELER_PROFILE_KEEP=$m" ;; esac
    b l8q4-$m "$e" -m /tmp/l8q4 -p 0 -n 128 -r 3
    b g3-$m "$e" --synth gemma3-4b -p 0 -n 128 -r 3
    b l8-$m "$e" --synth llama3-8b -p 0 -n 128 -r 3
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
