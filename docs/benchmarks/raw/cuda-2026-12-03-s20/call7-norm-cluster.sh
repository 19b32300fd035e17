#!/usr/bin/env bash
# session 19, call 7: add + RMSNorm over a thread-block cluster of 8 blocks a row
# (CUK_NORM_REG=2, the default in this build) against one block a row (1); the GPU
# tests first (the kernel test compares the three forms bit for bit).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19g.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 60 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL|differ" $O/kernels.log | head -6
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv; do
  timeout 60 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 60 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 60 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 60 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { local l=$1 e=$2; shift 2
  env $e timeout 60 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 60 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2; do
  for m in 1 2; do b l8q4-n$m CUK_NORM_REG=$m -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for m in 1 2; do b g3-n$m CUK_NORM_REG=$m --synth gemma3-4b -p 0 -n 128 -r 3; done
done
for m in 1 2; do b l8-n$m CUK_NORM_REG=$m --synth llama3-8b -p 0 -n 128 -r 3; done
for m in 1 2; do b l8-npl-n$m CUK_NORM_REG=$m --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 16384 -r 1; done
tar -C /tmp -cJf $OUT/r.tar.xz r
