#!/usr/bin/env bash
# session 20, call 13: one-row 16-bit products at 2 rows a warp where rows have 4,096+
# columns (the new default, after call 12's CUK_MV_ROWS=2 gain on llama3-8b bf16)
# against 1 row a warp (CUK_MV_ROWS=1, the old default); the kernel, graph and
# precision tests on it.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s20f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL" $O/kernels.log | head -4
for t in test_cuda_graph test_cuda_decode test_cuda_precision; do
  timeout 100 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
b() { local l=$1 e=$2; shift 2
  env $e timeout 60 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for v in X=1 CUK_MV_ROWS=1; do
    t=$(echo "$v" | tr ' =' '_-')
    b l8-$t "$v" --synth llama3-8b -p 0 -n 128 -r 3
    b g3-$t "$v" --synth gemma3-4b -p 0 -n 128 -r 3
  done
done
for v in X=1 CUK_MV_ROWS=1; do
  t=$(echo "$v" | tr ' =' '_-')
  b l8d-$t "$v" --synth llama3-8b -p 0 -n 128 -r 2 -d 4096
  b l1-$t "$v" --synth llama3.2-1b -p 0 -n 128 -r 3
done
tar -C /tmp -cJf $OUT/r.tar.xz r
