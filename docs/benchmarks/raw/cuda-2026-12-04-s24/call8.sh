#!/usr/bin/env bash
# session 24, call 8: ncu of the small kernels in decode steps (attention over <= 128
# keys, add + RMSNorm, o's quantizing launch) on llama3-8b q4, llama3-8b bf16 and
# gemma3-4b bf16: their durations alone, grids and occupancy, to set beside their cost
# on the step's critical path (call 5: attention 6.7 us a layer in q4, 2.1 in bf16).
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24g.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
S="--section SpeedOfLight --section LaunchStats --section Occupancy"
timeout 150 $C synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
K='regex:kernel_attn_split|kernel_add_rmsnorm|kernel_quant_x2|kernel_qk_norm_rope'
timeout 150 ncu --clock-control none -k "$K" -s 400 -c 12 $S $C bench --device cuda -m /tmp/l8q4 -p 0 -n 32 -r 1 -o md > $O/ncu-l8q4.txt 2>&1; el "ncu l8q4 rc=$?"
timeout 150 ncu --clock-control none -k "$K" -s 400 -c 12 $S $C bench --device cuda --synth llama3-8b -p 0 -n 32 -r 1 -o md > $O/ncu-l8.txt 2>&1; el "ncu l8 rc=$?"
timeout 150 ncu --clock-control none -k "$K" -s 400 -c 12 $S $C bench --device cuda --synth gemma3-4b -p 0 -n 32 -r 1 -o md > $O/ncu-g3.txt 2>&1; el "ncu g3 rc=$?"
for f in l8q4 l8 g3; do echo "== $f"; grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Grid Size|Block Size|Achieved Occupancy" $O/ncu-$f.txt | head -60; done
tar -C /tmp -cJf $OUT/r.tar.xz r
