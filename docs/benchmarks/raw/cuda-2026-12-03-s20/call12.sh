#!/usr/bin/env bash
# session 20, call 12: settings-only checks on the kept tree for gemma3-4b bf16 (82% of
# its goal): rows per warp of the one-row bf16 products (CUK_MV_ROWS), the small
# kernels' launch order fixed early (0) or late (63) against the per-graph choice, with
# and without the gate|up + GLU fusion; llama3-8b bf16 for the rows-per-warp check.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s20e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { local l=$1 e=$2; shift 2
  env $e timeout 60 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for v in X=1 CUK_MV_ROWS=2 CUK_MV_ROWS=4 CELER_PDL_LATE=0 CELER_PDL_LATE=63 "CELER_PDL_LATE=0 CUK_MV_GLU=0" "CELER_PDL_LATE=63 CUK_MV_GLU=0"; do
    b g3-$(echo "$v" | tr ' =' '_-') "$v" --synth gemma3-4b -p 0 -n 128 -r 3
  done
  for v in X=1 CUK_MV_ROWS=2; do b l8-$(echo "$v" | tr ' =' '_-') "$v" --synth llama3-8b -p 0 -n 128 -r 3; done
done
CELER_PROFILE=2 timeout 60 $N/celer bench --device cuda --synth gemma3-4b -p 0 -n 128 -r 1 > $O/g3-profile.txt 2>&1; el "profile rc=$?"
tar -C /tmp -cJf $OUT/r.tar.xz r
