#!/usr/bin/env bash
# session 12, call 1: the L2 prefetch of the next product's weights (CUK_L2_PREFETCH=MiB,
# side stream forked where a run of small ops starts): the GPU graph/batch tests with it
# on, then A/B in one binary, interleaved: llama3-8b tg128 and -npl 8,32, q4 tg128,
# gemma3-4b tg128; then CELER_STATS of decode steps at -npl 8/32/128.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s12a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $O/gpu.txt 2>&1
for t in "$N/tests/cuda/test_cuda_graph" "CUK_L2_PREFETCH=16 $N/tests/cuda/test_cuda_batch"; do
  f=$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_' | tail -c 60)
  timeout 200 env $t > "$O/$f.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$f.log" | head -n 6
done
tg() { # $1 label, rest: args
  local l=$1; shift
  timeout 100 $C bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l rc=$? $(grep -E '^\| [a-z]' $O/$l.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
}
for round in 1 2; do
  for pf in 0 16 32 8; do
    CUK_L2_PREFETCH=$pf tg tg-pf$pf --synth llama3-8b -p 0 -n 128 -r 2
  done
done
for round in 1 2; do
  for pf in 0 16 32; do
    CUK_L2_PREFETCH=$pf timeout 100 $C bench --device cuda --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 65536 -r 1 -o md >> $O/npl-pf$pf.md 2>&1
    echo "[$(( $(date +%s) - t0 )) s] npl pf=$pf rc=$? S_TG: $(grep -E '^\| +[0-9]' $O/npl-pf$pf.md | tail -n 2 | awk -F'|' '{print $(NF-3)}' | tr '\n' ' ')"
  done
done
for round in 1 2; do
  for pf in 0 16; do
    CUK_L2_PREFETCH=$pf tg g3-pf$pf --synth gemma3-4b -p 0 -n 128 -r 2
  done
done
timeout 120 $C synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth-q4.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] synth q4 rc=$?"
for round in 1 2; do
  for pf in 0 16; do
    CUK_L2_PREFETCH=$pf tg q4-pf$pf -m /tmp/l8q4 -p 0 -n 128 -r 2
  done
done
for npl in 8 32 128; do
  CELER_STATS=1 timeout 100 $C bench --device cuda --synth llama3-8b -npl $npl -p 64 -n 128 -c 65536 -r 1 -o md > $O/stats-$npl.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] stats npl=$npl rc=$?"; grep -E 'replayed|per forward' $O/stats-$npl.md | head -4
done
tar -C /tmp -cJf $R/r.tar.xz r
