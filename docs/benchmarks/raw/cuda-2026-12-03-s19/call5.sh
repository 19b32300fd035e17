#!/usr/bin/env bash
# session 19, call 5: the final tree (RoPE's arithmetic as before the session, the
# norms rounded as written, the fused RoPE + KV write, the 2,048-row int8 rule): every
# GPU test (graphs also with CUK_ROPE_PUT=0); the add + RMSNorm's int8 pass unrolled
# four pieces (build u2) against the tree; the session's final figures.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s19e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL" $O/kernels.log | head -8
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm test_cuda_sample; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
grep "differs" $O/test_cuda_decode.log | cut -c1-200
CUK_ROPE_PUT=0 timeout 300 $N/tests/cuda/test_cuda_graph > "$O/graph-rp0.log" 2>&1; el "graph rp0 rc=$? $(tail -n 1 $O/graph-rp0.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, build, args
  local l=$1 bd=$2; shift 2
  timeout 120 .gpu/$bd/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$bd] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for s in qwen3-0.6b llama3.2-1b gemma3-4b; do timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1; done
for round in 1 2; do
  for v in new u2; do b l8q4-$v $v -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for v in new u2; do b g3q4-$v $v -m /tmp/gemma3-4b-q4 -p 0 -n 128 -r 3; done
done
b l8q4-d4096 new -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096
b l8q4-pp new -m /tmp/l8q4 -p 512 -n 0 -r 3
b l1q4 new -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 3
b q06q4 new -m /tmp/qwen3-0.6b-q4 -p 0 -n 128 -r 3
for round in 1 2; do b l8 new --synth llama3-8b -p 512 -n 128 -r 3; done
b l8-d4096 new --synth llama3-8b -p 512 -n 128 -r 2 -d 4096
for round in 1 2; do b g3 new --synth gemma3-4b -p 512 -n 128 -r 3; done
b q06 new --synth qwen3-0.6b -p 512 -n 128 -r 3
for round in 1 2; do b l8-npl new --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1; done
b q06-npl new --synth qwen3-0.6b -npl 128 -p 64 -n 128 -c 32768 -r 1
CELER_PROFILE=2 timeout 100 $N/celer bench --device cuda --synth gemma3-4b -p 0 -n 128 -r 1 > $O/g3-profile.txt 2>&1; el "profile g3 rc=$?"
tar -C /tmp -cJf $OUT/r.tar.xz r
