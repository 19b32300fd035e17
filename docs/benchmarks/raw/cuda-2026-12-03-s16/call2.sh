#!/usr/bin/env bash
# session 16, call 2: (1) bf16 one-row products with double-buffered weight loads
# (kernel_mv_16, T <= 2); (2) the q4 one-row kernel (kernel_mv_affine_x1) with x read a
# word at a time and configurations of more blocks an SM (r2u2m4: 64 registers, 4
# blocks; r2u4m3, r4u2m3: 80 registers, 3 blocks). Tests first; then base (call 1's
# main) against new, interleaved: tg128 of llama3-8b bf16, gemma3-4b, qwen3-0.6b, and
# llama3-8b q4 per x1 configuration; ncu of the new one-row products.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s16b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new; B=.gpu/base16
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for c in default r2u2m4 r2u4m3 r4u2m3; do
  CUK_MV_X1CFG=$c timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-$c.log 2>&1; el "kernels $c rc=$? $(tail -n 1 $O/kernels-$c.log)"
done
grep -E "FAIL" $O/kernels-*.log | head -5
for t in test_cuda_graph test_cuda_decode test_cuda_batch; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, dir, cfg, args
  local l=$1 d=$2 c=$3; shift 3
  CUK_MV_X1CFG=$c timeout 100 $d/celer bench --device cuda "$@" -o md >> $O/$l-$c.md 2>&1
  el "$l $c rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l-$c.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for d in base new; do
    D=$B; [ $d = new ] && D=$N
    b l8-$d $D default --synth llama3-8b -p 0 -n 128 -r 3
    b g3-$d $D default --synth gemma3-4b -p 0 -n 128 -r 3
    b q06-$d $D default --synth qwen3-0.6b -p 0 -n 128 -r 3
    b l8d-$d $D default --synth llama3-8b -p 0 -n 128 -r 2 -d 4096
  done
  b l8q4-base $B default -m /tmp/l8q4 -p 0 -n 128 -r 3
  for c in default r2u2m4 r2u4m3 r4u2m3; do b l8q4-new $N $c -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section InstructionStats"
[ $(( $(date +%s) - t0 )) -lt 450 ] && { timeout 60 ncu --clock-control none -k regex:kernel_mv_16 -s 600 -c 4 $S $N/celer bench --device cuda --synth llama3-8b -p 0 -n 12 -r 1 > $O/ncu-mv16.txt 2>&1; el "ncu mv16 rc=$?"; }
for c in r2u2m4 r2u4m3; do
  [ $(( $(date +%s) - t0 )) -lt 520 ] && { CUK_MV_X1CFG=$c timeout 40 ncu --clock-control none -k regex:kernel_mv_affine_x1 -s 602 -c 2 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu-x1-$c.txt 2>&1; el "ncu $c rc=$?"; }
done
grep -E "^  void|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Instructions  " $O/ncu-*.txt | cut -c1-150
tar -C /tmp -cJf $OUT/r.tar.xz r
