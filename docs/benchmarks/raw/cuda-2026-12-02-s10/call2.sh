#!/usr/bin/env bash
# session 10, call 2: GPU tests of NEW (split-K products for few rows), split-K A/B by
# CUK_GEMM_SPLITK in one binary (llama3-8b -npl), gpt-oss-20b determinism matrix.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c2.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt
N=.gpu/new
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/times.txt; }
for t in "$N/tests/cuda/test_cuda_kernels" "CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "$N/tests/cuda/test_cuda_precision" "$N/tests/cuda/test_cuda_kv" "$N/tests/cuda/test_cuda_graph" \
         "$N/tests/cuda/test_cuda_decode" "$N/tests/cuda/test_cuda_batch" "CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures"; do
  f=$(basename "${t##* }")
  timeout 150 env $t > $O/$f.log 2>&1; r=$?
  stamp "$f rc=$r $(tail -n 1 $O/$f.log)"
  [ $r = 0 ] || grep -E "FAIL|fail" $O/$f.log | head -n 8 | tee -a $O/times.txt
done
for r in 1 2; do for v in 1 0 4 8; do
  echo "== CUK_GEMM_SPLITK=$v round $r" >> $O/npl.md
  CUK_GEMM_SPLITK=$v timeout 200 $N/celer bench --device cuda --synth llama3-8b -npl 8,16,32,64 -p 64 -n 128 -c 65536 -r 1 -o md 2>&1 | grep -E '^\| +64|rror' >> $O/npl.md
  stamp "npl splitk=$v $r"
done; done
P=$O/p2048.txt
awk -v n=2048 -v v=30000 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % (v - 3) } }' > $P
awk -v n=100 -v v=30000 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % (v - 3) } }' > $O/p100.txt
g() { local tag=$1 e=$2 p=$3 n=$4; shift 4
  timeout 120 env $e $N/celer generate --device cuda --synth gpt-oss-20b --tokens-file $p -n $n --temp 0 --ignore-eos "$@" > $O/goss-$tag.txt 2> $O/goss-$tag.err
  stamp "goss $tag rc=$? $(tr '\n' ' ' < $O/goss-$tag.txt | cut -c1-160)"; }
for i in 1 2 3; do g fast$i X=1 $P 6; done
for i in 1 2 3; do g graph0-$i CELER_GRAPH=0 $P 6; done
for i in 1 2 3; do g kvf32-$i CELER_KV_DTYPE=f32 $P 6; done
for i in 1 2 3; do g exactbf16-$i CELER_KV_DTYPE=bf16 $P 6 --precision exact; done
for i in 1 2 3; do g short$i X=1 $O/p100.txt 12; done
for i in 1 2; do g copy$i CELER_KV_INPLACE_WRITE=0 $P 6; done
for i in 1 2; do g hostsmp$i CELER_DEVICE_SAMPLE=0 $P 6; done
tar -C $OUT -cJf $OUT/r.tar.xz r
echo "=== npl"; cat $O/npl.md; echo "=== times"; cat $O/times.txt
