#!/usr/bin/env bash
# session 15, call 8: the final tree (32-token tiles, codes two steps ahead, the bench's
# full-length warm-up on a GPU) against the session's start: llama3-8b q4 -npl 8,32,
# two rounds; qgemm test.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15g.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r8; mkdir -p $O
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 60 .gpu/fin/tests/cuda/test_cuda_qgemm > $O/qgemm.log 2>&1; el "qgemm rc=$? $(tail -n 1 $O/qgemm.log)"
timeout 150 .gpu/fin/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, build, args
  local l=$1 a=$2; shift 2
  timeout 100 .gpu/$a/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  el "$l $a rc=$? $(grep -E '^\| *[0-9]' $O/$l-$a.md | tail -n 2 | awk -F'|' '{printf "%s/%s ", $(NF-5), $(NF-3)}')"
}
for round in 1 2; do
  for a in base fin; do
    [ $(( $(date +%s) - t0 )) -gt 200 ] && break 2
    b l8q4-npl $a -m /tmp/l8q4 -npl 8,32 -p 64 -n 128 -r 1
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r8
