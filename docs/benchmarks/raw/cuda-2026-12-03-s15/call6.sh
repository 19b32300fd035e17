#!/usr/bin/env bash
# session 15, call 6: call 5's llama3-8b -npl row again (it asked -npl 128 without -c:
# refused), q vs att interleaved, three rounds; plus qwen3-0.6b -npl 128.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
b() { # label, build, args
  local l=$1 a=$2; shift 2
  timeout 150 .gpu/$a/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  el "$l $a rc=$? $(grep -E '^\| *[0-9]' $O/$l-$a.md | tail -n 3 | awk -F'|' '{printf "%s ", $(NF-3)}')"
}
for round in 1 2 3; do
  for a in q att; do
    [ $(( $(date +%s) - t0 )) -gt 300 ] && break 2
    b l8-npl $a --synth llama3-8b -npl 8,32,128 -p 64 -n 128 -c 24576 -r 1
    b q06-npl $a --synth qwen3-0.6b -npl 128 -p 64 -n 128 -c 24576 -r 1
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r
