#!/usr/bin/env bash
# session 16, call 3: the 4-bit one-row kernel with a whole group a lane
# (kernel_mv_q4g_x1, CUK_MV_X1CFG=g64 / g64r4) against the chunk kernel (default), and
# base (call 1's main). Tests first (kernel tests under each configuration, graphs,
# decode, batch, fixtures); llama3-8b q4 tg128 interleaved, two rounds; ncu of g64.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s16c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new; B=.gpu/base16
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for c in default g64 g64r4; do
  CUK_MV_X1CFG=$c timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-$c.log 2>&1; el "kernels $c rc=$? $(tail -n 1 $O/kernels-$c.log)"
done
grep -E "FAIL" $O/kernels-*.log | head -6
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_qgemm; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, dir, cfg, args
  local l=$1 d=$2 c=$3; shift 3
  CUK_MV_X1CFG=$c timeout 100 $d/celer bench --device cuda "$@" -o md >> $O/$l-$c.md 2>&1
  el "$l $c rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l-$c.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  b l8q4-base $B default -m /tmp/l8q4 -p 0 -n 128 -r 3
  for c in default g64 g64r4; do b l8q4-new $N $c -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
for c in default g64; do b l8q4-d4096 $N $c -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section InstructionStats"
for c in g64 g64r4; do
  [ $(( $(date +%s) - t0 )) -lt 500 ] && { CUK_MV_X1CFG=$c timeout 50 ncu --clock-control none -k regex:kernel_mv_q4g -s 600 -c 5 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu-$c.txt 2>&1; el "ncu $c rc=$?"; }
done
grep -E "^  void|Duration|DRAM Throughput|Registers Per|Issue Slots Busy|Executed Instructions  " $O/ncu-*.txt | cut -c1-140
tar -C /tmp -cJf $OUT/r.tar.xz r
