#!/usr/bin/env bash
# session 20, call 15: the rows-per-warp rule with the SM fill check (2 rows a warp on
# 16-bit rows of 4,096+ columns unless halving the blocks spreads them less evenly over
# the SMs) against 1 row a warp.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s20g.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { local l=$1 e=$2; shift 2
  env $e timeout 60 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for v in X=1 CUK_MV_ROWS=1; do
    t=$(echo "$v" | tr ' =' '_-')
    b g3-$t "$v" --synth gemma3-4b -p 0 -n 128 -r 3
    b l8-$t "$v" --synth llama3-8b -p 0 -n 128 -r 3
    b l1-$t "$v" --synth llama3.2-1b -p 0 -n 128 -r 3
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
