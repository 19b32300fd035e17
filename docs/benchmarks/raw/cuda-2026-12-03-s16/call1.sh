#!/usr/bin/env bash
# session 16, call 1: the qgemm-occ branch against main (q4 decode batches), tests of
# occ's qgemm; ncu on the one-row products (q4 kernel_mv_affine_x1, bf16 kernel_mv_16)
# inside llama3-8b decode graphs; CELER_PROFILE=2 of one-row decode (q4, bf16).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s16a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new; C=.gpu/occ
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $O/gpu.txt 2>&1
timeout 150 $C/tests/cuda/test_cuda_qgemm > $O/qgemm-occ.log 2>&1; el "occ qgemm rc=$? $(tail -n 1 $O/qgemm-occ.log)"
grep -E "FAIL" $O/qgemm-occ.log | head -4
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, dir, args
  local l=$1 d=$2; shift 2
  timeout 150 $d/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 2 | awk -F'|' '{printf "%s/%s ", $(NF-1), $(NF-3)}')"
}
for round in 1 2; do
  b npl-main $N -m /tmp/l8q4 -npl 8,16,32 -p 64 -n 64 -r 1
  b npl-occ $C -m /tmp/l8q4 -npl 8,16,32 -p 64 -n 64 -r 1
done
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats --section ComputeWorkloadAnalysis"
timeout 150 ncu --clock-control none -k regex:kernel_mv_affine_x1 -s 600 -c 5 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu-x1.txt 2>&1; el "ncu x1 rc=$?"
timeout 150 ncu --clock-control none -k regex:kernel_mv_16 -s 600 -c 5 $S $N/celer bench --device cuda --synth llama3-8b -p 0 -n 12 -r 1 > $O/ncu-mv16.txt 2>&1; el "ncu mv16 rc=$?"
grep -E "kernel_mv|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Theoretical Occupancy|Issue Slots Busy|No Eligible|Eligible Warps|Dynamic Shared|Executed Ipc A" $O/ncu-*.txt | head -150
CELER_PROFILE=2 timeout 60 $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 64 -r 1 > $O/prof-q4.log 2>&1; el "prof q4 rc=$?"
CELER_PROFILE=2 timeout 60 $N/celer bench --device cuda --synth llama3-8b -p 0 -n 64 -r 1 > $O/prof-bf16.log 2>&1; el "prof bf16 rc=$?"
tail -n 30 $O/prof-q4.log
tar -C /tmp -cJf $OUT/r.tar.xz r
