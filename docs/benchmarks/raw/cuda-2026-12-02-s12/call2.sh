#!/usr/bin/env bash
# session 12, call 2: ncu on the batched decode attention (llama3-8b, 8 and 32
# sequences) and on the single-sequence step's small kernels; then the KV record's
# missing gemma4-12b rows (copying arm at 32 sequences, outputs of both arms).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s12a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
S="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats"
for npl in 8 32; do
  timeout 120 ncu --clock-control none -k regex:kernel_attn_batch -s 200 -c 3 $S $C bench --device cuda --synth llama3-8b -npl $npl -p 64 -n 32 -c 65536 -r 1 -o md > $O/ncu-attn-$npl.txt 2>&1
  echo "[$(( $(date +%s) - t0 )) s] ncu attn npl=$npl rc=$?"
done
timeout 150 ncu --clock-control none -k regex:'kernel_add_rmsnorm|kernel_attn_split|kernel_attn|kernel_glu|kernel_qk_norm_rope|kernel_put_rows|kernel_mv_16' -s 3000 -c 12 $S $C bench --device cuda --synth llama3-8b -p 0 -n 32 -r 1 -o md > $O/ncu-small-1.txt 2>&1
echo "[$(( $(date +%s) - t0 )) s] ncu small rc=$?"
grep -E '^  kernel_|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size' $O/ncu-*.txt | head -80
timeout 330 env OUT=$O/kv SYNTH=1 SHAPES=gemma4-12b REPS=1 ONE_ARMS= NPL_ARMS=0 BENCH_TIMEOUT=300 bash bench/gpu/kvrec.sh new > $O/kv-gemma4-12b.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] kvrec gemma4-12b rc=$?"; tail -n 8 $O/kv-gemma4-12b.log
tar -C /tmp -cJf $R/r.tar.xz r
