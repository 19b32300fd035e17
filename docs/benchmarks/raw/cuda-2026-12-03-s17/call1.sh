#!/usr/bin/env bash
# session 17, call 1: one-row 4-bit products on two-term int8 activations under the fast
# precision (kernel_quant_x2 + kernel_mv_q4g_i8, the register kernel: U = 2 steps of R = 2
# rows; norms and GLUs staging the activations; CUK_MV_I8X2=0 keeps float activations).
# Tests first (kernels, the same test against a kernel without the second term, graphs,
# decode, batch, qgemm, fixtures, precision envelope); llama3-8b q4 tg128 interleaved
# two rounds and at depth 4,096; qwen3-0.6b and gemma3-4b q4; the kernel table; ncu and
# SASS of the new kernel. (Reconstructed after the run from the session's edits: the
# packed archive was s17a.tar.xz; test_cuda_kernels_brk was built from matvec.cu with
# "(float)(ih[r] * 254 + il[r])" replaced by "(float)(ih[r] * 254)".)
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s17a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
timeout 100 $N/tests/cuda/test_cuda_kernels_brk > $O/kernels-broken.log 2>&1; el "kernels (broken kernel) rc=$? $(tail -n 1 $O/kernels-broken.log)"
grep -E "FAIL" $O/kernels*.log | head -8
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_qgemm; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
grep -E "fast" $O/test_cuda_graph.log | head -3
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
grep -iE "q4" $O/precision.log | head -12
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, I8X2 value, args
  local l=$1 c=$2; shift 2
  CUK_MV_I8X2=$c timeout 100 $N/celer bench --device cuda "$@" -o md >> $O/$l-$c.md 2>&1
  el "$l i8x2=$c rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l-$c.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for c in 1 0; do b l8q4 $c -m /tmp/l8q4 -p 0 -n 128 -r 3; done
done
for c in 1 0; do b l8q4-d4096 $c -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
b l8q4-exact 1 -m /tmp/l8q4 -p 0 -n 128 -r 3 --precision exact
if [ $(( $(date +%s) - t0 )) -lt 330 ]; then
  for s in qwen3-0.6b gemma3-4b; do
    timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 > /dev/null 2>&1
    for c in 1 0; do b $s-q4 $c -m /tmp/$s-q4 -p 0 -n 128 -r 3; done
  done
fi
timeout 120 $N/tests/cuda/test_cuda_kernels --bench-only > $O/kbench.log 2>&1; el "kernel bench rc=$?"
grep -E "q4g64|copy" $O/kbench.log | head -12
S="--section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section InstructionStats"
[ $(( $(date +%s) - t0 )) -lt 480 ] && { timeout 60 ncu --clock-control none -k regex:"kernel_mv_q4g_i8|kernel_quant_x2" -s 800 -c 8 $S $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 12 -r 1 > $O/ncu.txt 2>&1; el "ncu rc=$?"; }
grep -E "^  [a-z_]*kernel|^  void|Duration|DRAM Throughput|Registers Per|Issue Slots Busy|Executed Instructions  " $O/ncu.txt | cut -c1-140
cuobjdump -sass -fun '_Z16kernel_mv_q4g_i8ILi2ELi2ELi0EEvPK5uint4PKvS4_iS2_Pfii' $N/libceler-cuda.so > $O/sass-i8.txt 2>&1
tar -C /tmp -cJf $OUT/r.tar.xz r
