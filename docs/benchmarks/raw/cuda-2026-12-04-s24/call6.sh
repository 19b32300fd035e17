#!/usr/bin/env bash
# session 24, call 6: the launch order by kind (CELER_PDL_LATE masks) on the whole
# step, against auto (which picks 0 or 63 per graph): llama3-8b q4, gemma3-4b bf16,
# llama3-8b bf16, two rounds.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>> $O/$l.err
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2; do
  for m in auto 0 63 1 2 4 16 47 59; do
    b l8q4-late$m "CELER_PDL_LATE=$m CELER_STATS=1" -m /tmp/l8q4 -p 0 -n 128 -r 3
    b g3-late$m "CELER_PDL_LATE=$m CELER_STATS=1" --synth gemma3-4b -p 0 -n 128 -r 3
  done
done
for m in auto 0 63 16 47; do b l8-late$m "CELER_PDL_LATE=$m CELER_STATS=1" --synth llama3-8b -p 0 -n 128 -r 3; done
tar -C /tmp -cJf $OUT/r.tar.xz r
