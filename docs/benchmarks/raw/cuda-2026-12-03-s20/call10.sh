#!/usr/bin/env bash
# session 20, call 10: the one-row 4-bit gate|up product fused with its GLU and the
# GLU's int8 pieces (cuk_matvec_glu with piece counts): every GPU test (graphs also
# with CUK_MV_GLU=0), A/B of CUK_MV_GLU on the 4-bit and bf16 shapes, then the
# session's final figures (the nineteenth session's call 5 rows).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s20c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
grep -E "FAIL|differ" $O/kernels.log | head -8
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm test_cuda_sample; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
grep -E "FAIL|differ" $O/test_cuda_graph.log | cut -c1-200 | head -5
CUK_MV_GLU=0 timeout 300 $N/tests/cuda/test_cuda_graph > "$O/graph-glu0.log" 2>&1; el "graph glu0 rc=$? $(tail -n 1 $O/graph-glu0.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for s in qwen3-0.6b llama3.2-1b gemma3-4b; do timeout 100 $N/celer synth --shape $s --q4 -o /tmp/$s-q4 >> $O/synth.log 2>&1; done
for round in 1 2; do
  for m in 0 1; do b l8q4-glu$m CUK_MV_GLU=$m -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for m in 0 1; do b g3q4-glu$m CUK_MV_GLU=$m -m /tmp/gemma3-4b-q4 -p 0 -n 128 -r 3; done
  for m in 0 1; do b l1q4-glu$m CUK_MV_GLU=$m -m /tmp/llama3.2-1b-q4 -p 0 -n 128 -r 3; done
done
for m in 0 1; do b l8q4d-glu$m CUK_MV_GLU=$m -m /tmp/l8q4 -p 0 -n 128 -r 2 -d 4096; done
b l8q4-pp X=1 -m /tmp/l8q4 -p 512 -n 0 -r 3
b q06q4 X=1 -m /tmp/qwen3-0.6b-q4 -p 0 -n 128 -r 3
for round in 1 2; do b l8 X=1 --synth llama3-8b -p 512 -n 128 -r 3; done
b l8-d4096 X=1 --synth llama3-8b -p 512 -n 128 -r 2 -d 4096
for round in 1 2; do b g3 X=1 --synth gemma3-4b -p 512 -n 128 -r 3; done
b q06 X=1 --synth qwen3-0.6b -p 512 -n 128 -r 3
for round in 1 2; do b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1; done
b q06-npl X=1 --synth qwen3-0.6b -npl 128 -p 64 -n 128 -c 32768 -r 1
tar -C /tmp -cJf $OUT/r.tar.xz r
