#!/usr/bin/env bash
# session 15, call 9: ncu on the fused quantized kernel at 8 rows (llama3-8b gate|up
# 28,672 x 4,096 q4, 2 splits, 32-token tile; and down 4,096 x 14,336, 8 splits):
# why a product of 8 rows takes ~7x the time of reading its codes.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15g.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r9; mkdir -p $O
S="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats"
# kernel_qgemm launches in --bench-only: per shape, per T in 512 256 128 64 32 8: 18 fused runs
timeout 120 ncu --clock-control none -k regex:kernel_qgemm -s 92 -c 1 $S .gpu/fin/tests/cuda/test_cuda_qgemm --bench-only > $O/ncu-gateup-t8.txt 2>&1; echo "gate|up rc=$?"
timeout 120 ncu --clock-control none -k regex:kernel_qgemm -s 416 -c 1 $S .gpu/fin/tests/cuda/test_cuda_qgemm --bench-only > $O/ncu-down-t8.txt 2>&1; echo "down rc=$?"
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Theoretical Occupancy|Stall|Issue Slots|No Eligible|Eligible Warps|Shared Memory Config|Dynamic Shared" $O/ncu-*.txt | head -60
tar -C /tmp -cJf $OUT/r.tar.xz r9
