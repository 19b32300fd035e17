#!/usr/bin/env bash
# session 10, call 1: GPU tests of NEW (fused q|k|v and gate|up for every T), A/B vs BASE
# (bb676ea): llama3-8b -npl, pp512/tg128, qwen3-0.6b pp512; gpt-oss-20b determinism matrix.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c1.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader > $O/gpu.txt
N=.gpu/new B=.gpu/base
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/times.txt; }
# 1. tests
for t in "$N/tests/cuda/test_cuda_kernels" "$N/tests/cuda/test_cuda_sample" "CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "$N/tests/cuda/test_cuda_precision" "$N/tests/cuda/test_cuda_kv" "$N/tests/cuda/test_cuda_graph" \
         "$N/tests/cuda/test_cuda_decode" "$N/tests/cuda/test_cuda_batch" "CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures"; do
  f=$(basename "${t##* }")
  timeout 150 env $t > $O/$f.log 2>&1; r=$?
  stamp "$f rc=$r $(tail -n 1 $O/$f.log)"
  [ $r = 0 ] || grep -E "FAIL|fail" $O/$f.log | head -n 8 | tee -a $O/times.txt
done
# 2. batched A/B
for r in 1 2; do for x in new base; do
  echo "== $x round $r" >> $O/npl.md
  timeout 200 .gpu/$x/celer bench --device cuda --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1 -o md 2>&1 | grep -E '^\||rror' >> $O/npl.md
  stamp "npl $x $r"
done; done
# 3. single-stream A/B
for r in 1 2; do for x in new base; do
  for s in llama3-8b qwen3-0.6b; do
    echo "== $x $s round $r" >> $O/single.md
    timeout 150 .gpu/$x/celer bench --device cuda --synth $s -p 512 -n 128 -r 3 -o md 2>&1 | grep -E '^\||rror' >> $O/single.md
  done
  stamp "single $x $r"
done; done
# 4. gpt-oss-20b determinism: 2048-token prompt, 6 greedy tokens
P=$O/p2048.txt
awk -v n=2048 -v v=30000 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % (v - 3) } }' > $P
g() { local tag=$1 e=$2; shift 2
  timeout 120 env $e $N/celer generate --device cuda --synth gpt-oss-20b --tokens-file $P -n 6 --temp 0 --ignore-eos "$@" > $O/goss-$tag.txt 2> $O/goss-$tag.err
  stamp "goss $tag rc=$? $(tr '\n' ' ' < $O/goss-$tag.txt | cut -c1-160)"; }
g fast1 X=1; g fast2 X=1; g fast3 X=1
g pdl0a CELER_PDL=0; g pdl0b CELER_PDL=0
g graph0a CELER_GRAPH=0; g graph0b CELER_GRAPH=0
g exact1 X=1 --precision exact; g exact2 X=1 --precision exact
tar -C $OUT -cJf $OUT/r.tar.xz r
echo "=== npl"; cat $O/npl.md; echo "=== single"; cat $O/single.md; echo "=== times"; cat $O/times.txt
