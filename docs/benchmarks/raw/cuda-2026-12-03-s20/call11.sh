#!/usr/bin/env bash
# session 20, call 11: why the one-row 4-bit gate|up + GLU fusion lost (call 10):
# CUK_MV_GLU=0 (two launches) against 1 (fused, with the GLU's int8 pieces counted at
# the kernel's end) against 1 with CUK_GLU_NOPIECES (this build only: fused, no pieces;
# the down product quantizes its input itself, so as many launches as 0); and
# CELER_PROFILE=2 of 0 and 1 on llama3.2-1b q4.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s20d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { local l=$1 e=$2; shift 2
  env $e timeout 60 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for s in llama3.2-1b gemma3-4b; do timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1; done
for round in 1 2; do
  for v in "CUK_MV_GLU=0" "CUK_MV_GLU=1" "CUK_GLU_NOPIECES=1"; do
    t=${v%%=*}; t=$(echo $t | tr 'A-Z_' 'a-z-')${v##*=}
    b l8q4-$t "$v" -m /tmp/l8q4 -p 0 -n 128 -r 3
    b l1q4-$t "$v" -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 3
    b g3q4-$t "$v" -m /tmp/gemma3-4b-q4 -p 0 -n 128 -r 3
  done
done
for m in 0 1; do
  CELER_PROFILE=2 CUK_MV_GLU=$m timeout 60 $N/celer bench --device cuda -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 1 > $O/l1q4-profile-glu$m.txt 2>&1
  el "profile glu$m rc=$?"
done
tar -C /tmp -cJf $OUT/r.tar.xz r
