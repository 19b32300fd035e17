#!/usr/bin/env bash
# session 17, call 2: the two-term int8 one-row 4-bit kernel with its weights streamed
# through shared memory by cp.async (kernel_mv_q4g_i8a; CUK_MV_I8CFG=a4r2 default, a8r1,
# a3r2, reg = call 1's register kernel), norms and GLUs staging its activations.
# Tests (kernels under each configuration and a broken build), graphs, decode, batch,
# fixtures, precision; llama3-8b q4 tg128 per configuration and float (CUK_MV_I8X2=0),
# two rounds; depth 4,096; qwen3-0.6b and gemma3-4b q4; fast with an f32 KV cache and
# exact beside fast; kernel table; ncu.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s17b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for c in a4r2 reg a8r1 a3r2; do
  CUK_MV_I8CFG=$c timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-$c.log 2>&1; el "kernels $c rc=$? $(tail -n 1 $O/kernels-$c.log)"
done
timeout 100 $N/tests/cuda/test_cuda_kernels_brk > $O/kernels-broken.log 2>&1; el "kernels (broken) rc=$? $(tail -n 1 $O/kernels-broken.log)"
grep -E "FAIL|:[0-9]+: " $O/kernels*.log | head -8
for t in test_cuda_graph test_cuda_decode test_cuda_batch; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
grep -E "fast" $O/test_cuda_graph.log | head -3
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
grep -E "q4 " $O/precision.log | head -6
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for c in a4r2 reg a8r1 a3r2; do b l8q4-$c CUK_MV_I8CFG=$c -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  b l8q4-float CUK_MV_I8X2=0 -m /tmp/l8q4 -p 0 -n 128 -r 3
done
b l8q4-d4096-a4r2 CUK_MV_I8X2=1 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
b l8q4-d4096-float CUK_MV_I8X2=0 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
b l8q4-fast-kvf32 CELER_KV_DTYPE=f32 -m /tmp/l8q4 -p 0 -n 128 -r 3
b l8q4-exact CUK_MV_I8X2=1 -m /tmp/l8q4 -p 0 -n 128 -r 3 --precision exact
for s in qwen3-0.6b gemma3-4b; do
  timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 > /dev/null 2>&1
  b $s-q4-i8 CUK_MV_I8X2=1 -m /tmp/$s-q4 -p 0 -n 128 -r 3
  b $s-q4-float CUK_MV_I8X2=0 -m /tmp/$s-q4 -p 0 -n 128 -r 3
done
timeout 120 $N/tests/cuda/test_cuda_kernels --bench-only > $O/kbench.log 2>&1; el "kernel bench rc=$?"
grep -E "q4g64|copy" $O/kbench.log | head -12
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section InstructionStats"
[ $(( $(date +%s) - t0 )) -lt 480 ] && { timeout 60 ncu --clock-control none -k regex:"kernel_mv_q4g_i8|kernel_quant_x2|add_rmsnorm|glu" -s 1600 -c 12 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu.txt 2>&1; el "ncu rc=$?"; }
grep -E "^  [a-z_]*kernel|^  void|Duration|DRAM Throughput|Registers Per|Issue Slots Busy|Executed Instructions  " $O/ncu.txt | cut -c1-140
tar -C /tmp -cJf $OUT/r.tar.xz r
