#!/usr/bin/env bash
# bench/gpu/ab.sh NEW BASE: one short GPU call for a kernel change, run from the
# repository root after unpacking bench/gpu/pack.sh's archive into .gpu/ (NEW/ with its
# tests, BASE/ with celer and libceler-cuda.so, lib/). While the checkpoints are
# synthesized (CPU), the GPU tests of NEW run side by side: the kernels, the fast
# precision's envelope (test_cuda_precision, margins in its log; it runs the exact
# path on every fixture too) and, unless FIXTURES=0, the fixtures on the exact path. Then, one at a time, `celer bench --precision fast` of NEW and BASE
# interleaved (A/B in the same call) on the SHAPES (pp512/tg128) and DEPTH_SHAPES
# (the same with 4,096 tokens in the cache), the kernel benchmark, and CELER_PROFILE=1
# (per-op GPU time) of one pp512 forward of PROFILE_SHAPE for NEW and BASE. Logs go
# to $OUT; the most important rows come first, so a call cut short keeps them.
set -u
NEW=.gpu/$1; BASE=.gpu/$2
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SHAPES=${SHAPES:-"llama3-8b qwen3-0.6b"}
DEPTH_SHAPES=${DEPTH_SHAPES:-"llama3-8b"}
PROFILE_SHAPE=${PROFILE_SHAPE:-llama3-8b}
REPS=${REPS:-2}
synth() {
  for s in $SHAPES; do
    d=/tmp/synth-$s; q=; case $s in *-q4) q=--q4 ;; esac
    [ -d "$d" ] || "$NEW/celer" synth --shape "${s%-q4}" $q -o "$d" > /dev/null || echo "synth $s failed"
  done
}
synth > /tmp/synth.log 2>&1 &
spid=$!
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 120 "$NEW/tests/cuda/test_cuda_kernels" > "$OUT/kernels.log" 2>&1 & k=$!
  timeout 120 "$NEW/tests/cuda/test_cuda_precision" > "$OUT/precision.log" 2>&1 & p=$!
  jobs_="kernels $k,precision $p"
  if [ "${FIXTURES:-1}" = 1 ]; then # the exact path's fixture test (test_cuda_precision runs exact too)
    timeout 120 env CELER_DEVICE=cuda "$NEW/tests/test_fixtures_models" > "$OUT/fixtures-exact.log" 2>&1 & f=$!
    jobs_="$jobs_,fixtures-exact $f"
  fi
  IFS=, read -ra jl <<< "$jobs_"
  for j in "${jl[@]}"; do
    set -- $j; wait "$2"; r=$?
    echo "== $1 (exit $r)"; tail -n 2 "$OUT/$1.log"; [ $r = 0 ] || { echo "FAILED: $1"; rc=1; }
  done
  grep -E '^  |FAIL' "$OUT/precision.log" | head -40
fi
wait $spid
cat /tmp/synth.log
b() { # b SHAPE BUILD ARGS...: one celer bench row set
  local s=$1 x=$2; shift 2
  echo "== $s $x $*"
  "$x/celer" bench --device cuda --precision fast -m /tmp/synth-$s "$@" -r "$REPS" -o md 2>&1 | grep -E '^\| [a-z]|^cuda:' | tee -a "$OUT/bench.md"
}
for s in $DEPTH_SHAPES; do for x in "$NEW" "$BASE"; do b "$s" "$x" -d 4096 -p 512 -n 128; done; done
for s in $SHAPES; do for x in "$NEW" "$BASE"; do b "$s" "$x" -p 512 -n 128; done; done
if [ "${BENCH_KERNELS:-1}" = 1 ]; then
  timeout 60 "$NEW/tests/cuda/test_cuda_kernels" --bench-only > "$OUT/kernels-bench.log" 2>&1
  grep -E 'attention|copy' "$OUT/kernels-bench.log"
fi
for x in "$NEW" "$BASE"; do
  echo "== profile $PROFILE_SHAPE $x pp512"
  CELER_PROFILE=1 "$x/celer" bench --device cuda --precision fast -m /tmp/synth-$PROFILE_SHAPE -p 512 -n 0 -r 1 -o md \
    > "$OUT/profile-$(basename "$x").log" 2>&1
  grep -E 'cuda profile|^  ' "$OUT/profile-$(basename "$x").log"
done
exit $rc
