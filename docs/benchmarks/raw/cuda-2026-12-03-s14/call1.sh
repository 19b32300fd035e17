#!/usr/bin/env bash
# session 13, call 1: the launch order of small kernels chosen per step graph
# (CELER_PDL_LATE=auto, late_order.c). GPU tests (kernels incl. the mask reaching every
# file, graph with auto / fixed-late / op-by-op bitwise, batch, decode, fixtures);
# then tg128 of eight shapes with CELER_PDL_LATE = 0 (early, the old default), 63
# (late) and auto, interleaved, two rounds; the choices under CELER_STATS.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s13a.tar.xz || exit 9 # pack: bench/gpu/pack.sh .gpu/s13a.tar.xz new (new -> a CUDA_PTX=0 build of this branch)
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
for t in test_cuda_kernels test_cuda_graph test_cuda_batch test_cuda_decode; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$t.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$t.log" | head -n 6
done
grep -E "steps:" $O/test_cuda_graph.log
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 120 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth-q4.log 2>&1
tg() { # $1 label, $2 arm, rest: args
  local l=$1 a=$2; shift 2
  CELER_PDL_LATE=$a timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l $a rc=$? $(grep -E '^\| [a-z]' $O/$l-$a.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
}
for round in 1 2; do
  for s in gemma3-4b llama3-8b q4 qwen3-0.6b llama3.2-1b gemma4-e4b exaone4-1.2b gpt-oss-20b; do
    [ $(( $(date +%s) - t0 )) -gt 480 ] && break 2
    for a in 0 63 auto; do
      if [ $s = q4 ]; then tg $s $a -m /tmp/l8q4 -p 0 -n 128 -r 2; else tg $s $a --synth $s -p 0 -n 128 -r 2; fi
    done
  done
done
CELER_STATS=1 timeout 100 $N/celer bench --device cuda --synth gemma3-4b -p 0 -n 128 -r 1 > $O/stats-g3.log 2>&1
grep -E "launch|step graph" $O/stats-g3.log | head -n 8
tar -C /tmp -cJf $R/r.tar.xz r
