#!/usr/bin/env bash
# session 20, call 14: gemma3-4b bf16 lost 1.5% with 2 rows a warp on its 10,240-column
# down product (call 13): the same A/B with the small kernels' launch order fixed
# early (0) and late (63), to see whether the loss follows the order.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s20f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { local l=$1 e=$2; shift 2
  env $e timeout 60 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for v in "CELER_PDL_LATE=0" "CELER_PDL_LATE=0 CUK_MV_ROWS=1" "CELER_PDL_LATE=63" "CELER_PDL_LATE=63 CUK_MV_ROWS=1"; do
    b g3-$(echo "$v" | tr ' =' '_-') "$v" --synth gemma3-4b -p 0 -n 128 -r 3
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
