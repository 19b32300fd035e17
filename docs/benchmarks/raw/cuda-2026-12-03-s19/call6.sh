#!/usr/bin/env bash
# session 19, call 6: ncu of the small kernels of a llama3-8b q4 and bf16 decode step
# (the final tree): add + RMSNorm (register form, with and without the int8 pass), the
# one-query attention, q/k norm + RoPE with the KV write, the GLU, o's quantizing launch.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
S="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis"
K='regex:add_rmsnorm|kernel_attn_split|qk_norm_rope|glu_q8x2|quant_x2|kernel_glu'
timeout 150 ncu --clock-control none -k "$K" -s 600 -c 12 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 16 -r 1 > $O/ncu-l8q4.txt 2>&1; el "ncu q4 rc=$?"
timeout 150 ncu --clock-control none -k "$K" -s 600 -c 8 $S $N/celer bench --device cuda --synth llama3-8b -p 0 -n 16 -r 1 > $O/ncu-l8.txt 2>&1; el "ncu bf16 rc=$?"
for f in $O/ncu-l8q4.txt $O/ncu-l8.txt; do
  grep -E "^  [a-zA-Z_]*kernel|^  void|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|One or More Eligible" $f | cut -c1-150 | head -80
done
tar -C /tmp -cJf $OUT/r.tar.xz r
