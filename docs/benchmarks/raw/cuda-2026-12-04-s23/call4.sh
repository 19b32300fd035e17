#!/usr/bin/env bash
# session 23, call 4: bf16 activations staged ahead for steps past the matrix-vector
# kernels' rows (5-8 rows now too: CUK_STAGE_MIN_T=0, the new rule, against 9, the
# rule before), so an 8-sequence step's products skip their conversion launches. The
# GPU tests that run batched and chunked steps; the A/B alternated at 8 and 32
# sequences of llama3-8b bf16 (three rounds) and 8 of qwen3-0.6b (two); a profile of
# the 8- and 32-sequence steps (CELER_PROFILE=2); the final rows twice.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s23d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
CUK_STAGE_MIN_T=9 timeout 300 $N/tests/cuda/test_cuda_batch > "$O/batch-stage9.log" 2>&1; el "batch (old rule) rc=$? $(tail -n 1 $O/batch-stage9.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 150 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| +[0-9]' $O/$l.md | tail -n ${ROWS:-2} | awk -F'|' '{printf "%s ", $9}')"
}
for round in 1 2 3; do
  for k in 0 9; do
    b l8-npl-min$k CUK_STAGE_MIN_T=$k --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
  done
done
for round in 1 2; do
  for k in 0 9; do
    ROWS=1 b q06-npl8-min$k CUK_STAGE_MIN_T=$k --synth qwen3-0.6b -npl 8 -p 64 -n 128 -c 32768 -r 1
  done
done
ROWS=2 b l8-profile CELER_PROFILE=2 --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1
ROWS=4 b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
ROWS=4 b l8-npl X=1 --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 32768 -r 1
ROWS=1 b g3-npl X=1 --synth gemma3-4b -npl 32 -p 64 -n 128 -c 16384 -r 1
b q06-npl X=1 --synth qwen3-0.6b -npl 32,128 -p 64 -n 128 -c 32768 -r 1
tar -C /tmp -cJf $OUT/r.tar.xz r
