#!/usr/bin/env bash
# session 18, call 1: the seventeenth session's final tree on the GPU (every GPU test),
# and an A/B of the int8 q4 product with an L2 prefetch of each warp's next task
# (CUK_Q4_PF=0/1/2 tasks ahead; experiment), llama3-8b q4 tg128 interleaved; gemma3-4b
# bf16 decode profiled by op kind (CELER_PROFILE=2); ncu of the product with and without.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s18a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for pf in 0 1 2; do b l8q4-pf$pf CUK_Q4_PF=$pf -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
for pf in 0 1; do b l8q4-d4096-pf$pf CUK_Q4_PF=$pf -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda --synth gemma3-4b -p 0 -n 128 -r 1 > $O/g3-profile.txt 2>&1; el "g3 profile rc=$?"
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 128 -r 1 > $O/l8q4-profile.txt 2>&1; el "l8q4 profile rc=$?"
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis"
for pf in 0 1; do
  [ $(( $(date +%s) - t0 )) -lt 470 ] && { CUK_Q4_PF=$pf timeout 60 ncu --clock-control none -k regex:"kernel_mv_q4g_i8" -s 400 -c 4 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu-pf$pf.txt 2>&1; el "ncu pf$pf rc=$?"; }
  grep -E "^  [a-z_]*kernel|^  void|Duration|DRAM Throughput|L2 Hit" $O/ncu-pf$pf.txt | cut -c1-140
done
tar -C /tmp -cJf $OUT/r.tar.xz r
