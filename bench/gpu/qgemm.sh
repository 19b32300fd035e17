#!/usr/bin/env bash
# bench/gpu/qgemm.sh NEW [BASE]: run on the GPU machine from the repository root after
# unpacking bench/gpu/pack.sh's archive into .gpu/ (NEW/, BASE/ and lib/). The quantized
# prefill record (docs/benchmarks/cuda.md, "quantized prefill on the tensor cores"):
# synthesizes the q4 shapes in the background, runs test_cuda_qgemm (the fused kernel
# against host references, then its benchmark against dequantize + cuBLAS), the fixtures
# on the exact precision (gpt_oss-mxfp4 now reads its experts as MXFP4) and the fast
# precision's envelope test on the quantized fixtures, then `celer bench -p 512 -n 128`
# per shape: NEW, NEW with CUK_QGEMM=0 (the dequantize + cuBLAS path) and BASE (the tree
# before this work) in the same call (VARIANTS picks some; REPS repetitions, 2). Logs go
# to $OUT as each step ends. SHAPES chooses the benchmarks; SKIP_TESTS=1 skips the tests.
set -u
NEW=.gpu/$1; BASE=${2:+.gpu/$2}
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SD=${SYNTH_DIR:-/tmp}
SHAPES=${SHAPES:-"llama3-8b-q4 qwen3-0.6b-q4 gpt-oss-20b-q4"}
synth() {
  for s in $SHAPES; do
    d=$SD/synth-$s; q=; case $s in *-q4) q=--q4 ;; esac
    [ -d "$d" ] || "$NEW/celer" synth --shape "${s%-q4}" $q -o "$d" > /dev/null || echo "synth $s failed"
    touch "$d.done"
  done
}
synth > /tmp/synth.log 2>&1 &
spid=$!
rc=0
t() { # t NAME TIMEOUT COMMAND...: one test, its log, its last lines
  local n=$1 to=$2; shift 2
  echo "== $n"; timeout "$to" env "$@" > "$OUT/$n.log" 2>&1; local r=$?
  tail -n 2 "$OUT/$n.log"; [ $r = 0 ] || { echo "FAILED: $n (exit $r)"; rc=1; }
}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t qgemm 120 "$NEW/tests/cuda/test_cuda_qgemm" --bench
  grep -E 'FAIL|^  [a-z]|^\|' "$OUT/qgemm.log" | head -60
  t fixtures-exact ${TEST_S:-180} CELER_DEVICE=cuda "$NEW/tests/test_fixtures_models"
  grep -E 'FAIL' "$OUT/fixtures-exact.log" | head -20
  t precision-q ${TEST_S:-180} "$NEW/tests/cuda/test_cuda_precision" --only llama-q4,qwen3-q4,gemma3-q4,qwen2-q4,mistral-q4,gpt_oss-mxfp4
  grep -E '^  |FAIL' "$OUT/precision-q.log" | head -40
fi
for s in $SHAPES; do
  while [ ! -e $SD/synth-$s.done ]; do sleep 1; done # each shape as soon as it is written
  [ -d $SD/synth-$s ] || continue
  vs=${VARIANTS:-"new new-noqgemm base"}; [ -n "$BASE" ] || vs=${vs/base/}
  for v in $vs; do
    b=$NEW; e=; case $v in new-noqgemm) e=CUK_QGEMM=0 ;; base) b=$BASE ;; esac
    echo "== $s $v"
    env $e "$b/celer" bench --device cuda -m $SD/synth-$s -p 512 -n 128 -r "${REPS:-2}" -o md 2>&1 | grep -E '^\||^cuda:' | tee -a "$OUT/bench-$s-$v.md"
  done
done
wait $spid
cat /tmp/synth.log
exit $rc
