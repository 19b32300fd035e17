#!/usr/bin/env bash
# session 24, call 2: every GPU test on the tree with the step taken apart in its own
# function (run_ops_apart), then CELER_PROFILE 0/4/5/6/8/9 on llama3-8b q4, gemma3-4b
# bf16 and llama3-8b bf16 (two rounds), 2 and 7 once.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 120 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm test_cuda_sample; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>> $O/$l.err
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2; do
  for m in 0 4 5 6 8 9; do b l8q4-p$m CELER_PROFILE=$m -m /tmp/l8q4 -p 0 -n 128 -r 3; done
  for m in 0 4 5 6 8 9; do b g3-p$m CELER_PROFILE=$m --synth gemma3-4b -p 0 -n 128 -r 3; done
  for m in 0 4 5 6 8 9; do b l8-p$m CELER_PROFILE=$m --synth llama3-8b -p 0 -n 128 -r 3; done
done
for m in 2 7; do
  b l8q4-p$m CELER_PROFILE=$m -m /tmp/l8q4 -p 0 -n 128 -r 3
  b g3-p$m CELER_PROFILE=$m --synth gemma3-4b -p 0 -n 128 -r 3
  b l8-p$m CELER_PROFILE=$m --synth llama3-8b -p 0 -n 128 -r 3
done
tar -C /tmp -cJf $OUT/r.tar.xz r
