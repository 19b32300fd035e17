#!/usr/bin/env bash
# session 19, call 1: add + RMSNorm with the row in registers (every load issued at
# once; CUK_NORM_REG=1, the default) against the loop form (CUK_NORM_REG=0); every GPU
# test; the int8 q4 product's size rule at three blocks (CUK_MV_I8X2=1 vs 2) on the
# small q4 shapes; profiles by op kind of llama3-8b q4 with each norm form.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL" $O/kernels.log | head -5
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2; do
  for m in 0 1; do b l8q4-n$m CUK_NORM_REG=$m -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for m in 0 1; do b l8-n$m CUK_NORM_REG=$m --synth llama3-8b -p 0 -n 128 -r 3; done
  for m in 0 1; do b g3-n$m CUK_NORM_REG=$m --synth gemma3-4b -p 0 -n 128 -r 3; done
done
for m in 0 1; do b q06-n$m CUK_NORM_REG=$m --synth qwen3-0.6b -p 0 -n 128 -r 3; done
for m in 0 1; do b l8-d4096-n$m CUK_NORM_REG=$m --synth llama3-8b -p 0 -n 128 -r 2 -d 4096; done
for m in 0 1; do b l8-npl-n$m CUK_NORM_REG=$m --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 16384 -r 1; done
for m in 0 1; do CUK_NORM_REG=$m CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 128 -r 1 > $O/l8q4-profile-n$m.txt 2>&1; el "profile n$m rc=$?"; done
for s in qwen3-0.6b llama3.2-1b; do
  timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1
  for r in 1 2; do for m in 1 2; do b $s-q4-i8x$m CUK_MV_I8X2=$m -m /tmp/$s-q4 -p 0 -n 128 -r 3; done; done
done
el done
