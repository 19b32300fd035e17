#!/usr/bin/env bash
# session 19, call 3: the int8 q4 product quantizing a float x itself in each block
# (CUK_I8_SELFQ=1, experiment knob; 0 keeps kernel_quant_x2's launch) on o's input;
# the int8 size rule at 2,048 rows (the tree's default now); test_cuda_decode under
# settings that change only the order of sums (attention warps) or the kernels (the
# fused RoPE + KV write off, the loop-form norm) to see whether its rotating-cache
# sampled check depends on low bits; every GPU test; the session's figures.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL" $O/kernels.log | head -8
CUK_I8_SELFQ=0 timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-sq0.log 2>&1; el "kernels sq0 rc=$? $(tail -n 1 $O/kernels-sq0.log)"
for t in test_cuda_graph test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
d() { local l=$1; shift; env "$@" timeout 300 $N/tests/cuda/test_cuda_decode > "$O/decode-$l.log" 2>&1; el "decode $l rc=$? $(tail -n 1 $O/decode-$l.log) $(grep -c 'differs' $O/decode-$l.log)"; }
d default X=1
d rp0 CUK_ROPE_PUT=0
d norm0 CUK_NORM_REG=0
d rp0norm0 CUK_ROPE_PUT=0 CUK_NORM_REG=0
d w4 CUK_ATTN_WARPS=4
d w16 CUK_ATTN_WARPS=16
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env assignment, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for s in qwen3-0.6b llama3.2-1b gemma3-4b; do timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1; done
for round in 1 2; do
  for m in 0 1; do b l8q4-sq$m CUK_I8_SELFQ=$m -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for m in 0 1; do b g3q4-sq$m CUK_I8_SELFQ=$m -m /tmp/gemma3-4b-q4 -p 0 -n 128 -r 3; done
  for m in 0 1; do b l1q4-sq$m CUK_I8_SELFQ=$m -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 3; done
done
for m in 0 1; do b l8q4-d4096-sq$m CUK_I8_SELFQ=$m -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
b q06q4 X=1 -m /tmp/qwen3-0.6b-q4 -p 0 -n 128 -r 3
b l8 X=1 --synth llama3-8b -p 512 -n 128 -r 3
b l8-d4096 X=1 --synth llama3-8b -p 512 -n 128 -r 2 -d 4096
b g3 X=1 --synth gemma3-4b -p 512 -n 128 -r 3
b q06 X=1 --synth qwen3-0.6b -p 512 -n 128 -r 3
b l8q4-pp X=1 -m /tmp/l8q4 -p 512 -n 0 -r 3
b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
b q06-npl X=1 --synth qwen3-0.6b -npl 128 -p 64 -n 128 -c 32768 -r 1
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda -m /tmp/l8q4 -p 0 -n 128 -r 1 > $O/l8q4-profile.txt 2>&1; el "profile rc=$?"
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda --synth llama3-8b -p 0 -n 128 -r 1 > $O/l8-profile.txt 2>&1; el "profile l8 rc=$?"
tar -C /tmp -cJf $OUT/r.tar.xz r
