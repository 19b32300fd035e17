#!/usr/bin/env bash
# session 18, call 3: the int8 q4 product at 3 blocks an SM (default now; CUK_Q4_MB=2 the
# previous 2, 41 = 4 rows x 1 step at 3 blocks; experiment knob) and the o product's int8
# pieces written by attention (CUK_Q8X2_ATTN=0: its own quantizing launch; experiment
# knob). Every GPU test first, the kernel test also against a build whose attention
# kernels skip the pieces (test_cuda_kernels_brk: must fail q8x2_attention_staging).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s18c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
timeout 100 $N/tests/cuda/test_cuda_kernels_brk > $O/kernels-broken.log 2>&1; el "kernels (attention without pieces) rc=$? $(tail -n 1 $O/kernels-broken.log)"
grep -E "FAIL" $O/kernels*.log | head -6
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
grep -E "fast" $O/test_cuda_graph.log | head -3
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
  b l8q4-new CUK_Q4_MB=3 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-noattn CUK_Q8X2_ATTN=0 -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-mb2 "CUK_Q4_MB=2 CUK_Q8X2_ATTN=0" -m /tmp/l8q4 -p 0 -n 128 -r 3
  b l8q4-r4u1 CUK_Q4_MB=41 -m /tmp/l8q4 -p 0 -n 128 -r 3
done
for round in 1 2; do
  b l8q4-d4096-new CUK_Q4_MB=3 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
  b l8q4-d4096-noattn CUK_Q8X2_ATTN=0 -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
  b l8q4-d4096-mb2 "CUK_Q4_MB=2 CUK_Q8X2_ATTN=0" -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
done
timeout 100 $N/celer synth --shape gemma3-4b --q4 -o /tmp/g3q4 > /dev/null 2>&1
for round in 1 2; do
  b g3q4-new CUK_Q4_MB=3 -m /tmp/g3q4 -p 0 -n 128 -r 3
  b g3q4-mb2 CUK_Q4_MB=2 -m /tmp/g3q4 -p 0 -n 128 -r 3
done
b l8q4-pp512 CUK_Q4_MB=3 -m /tmp/l8q4 -p 512 -n 0 -r 3
b l8-bf16 CUK_Q4_MB=3 --synth llama3-8b -p 0 -n 128 -r 3
tar -C /tmp -cJf $OUT/r.tar.xz r
