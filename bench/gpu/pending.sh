#!/usr/bin/env bash
# bench/gpu/pending.sh NEW: what the tenth session (2026-12-02) wrote without a GPU,
# checked and measured in one call. Run on the GPU machine from the repository root
# after unpacking bench/gpu/pack.sh's archive into .gpu/ (NEW/ with its tests, lib/).
# Every A/B here is in one binary. About 10 minutes in all: split it over two calls
# (steps 1-3, then 4) where a call is limited to 600 s. Logs in $OUT; the summary (times.txt) last on stdout.
#   1. the GPU tests of NEW (`make test-cuda`'s list): test_cuda_kernels holds the new
#      q4tc kernel's test, test_cuda_decode the device-made experts' (synth_fill_experts);
#   2. gpt-oss-20b with device-made bf16 experts: one-token forwards twice, bit for bit
#      (bench/gpu/logits_diff.py), the run-to-run difference the fix should remove;
#   3. the tensor-core 4-bit decode product: llama3-8b q4 tg128 with CUK_MV_Q4TC=1 and
#      =0 interleaved (the same binary), and test_cuda_precision with it on;
#   4. the KV record's missing rows: gpt-oss-20b with MXFP4 experts (Q4=1) and
#      gemma4-12b, SYNTH=1 for the latter (bench/gpu/kvrec.sh).
set -u
N=.gpu/$1
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/lg
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/times.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for t in "$N/tests/cuda/test_cuda_kernels" "$N/tests/cuda/test_cuda_decode" "CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "$N/tests/cuda/test_cuda_precision" "$N/tests/cuda/test_cuda_kv" "$N/tests/cuda/test_cuda_graph" \
         "$N/tests/cuda/test_cuda_batch" "$N/tests/cuda/test_cuda_sample" "CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures"; do
  f=$(basename "${t##* }")
  timeout 200 env $t > "$OUT/$f.log" 2>&1; r=$?
  stamp "$f rc=$r $(tail -n 1 "$OUT/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$OUT/$f.log" | head -n 6 | tee -a "$OUT/times.txt"
done
echo "1000,2000,3000,4000,5000,6000,7000,8000" > "$OUT/p8.txt"
for ab in a b; do
  timeout 120 "$N/celer" logits --device cuda --synth gpt-oss-20b --tokens-file "$OUT/p8.txt" --chunk 1 -o /tmp/lg/goss-$ab.st \
    > "$OUT/goss-$ab.err" 2>&1 || stamp "gpt-oss logits $ab failed: $(tail -n 1 "$OUT/goss-$ab.err")"
done
stamp "gpt-oss-20b --synth, one-token forwards twice: $(python3 bench/gpu/logits_diff.py /tmp/lg/goss-a.st /tmp/lg/goss-b.st 2>&1 | tr '\n' ' ')"
q=/tmp/synth-llama3-8b-q4
[ -d $q ] || "$N/celer" synth --shape llama3-8b --q4 -o $q > /dev/null 2>&1 || stamp "synth llama3-8b --q4 failed"
for r in 1 2; do for v in 1 0; do
  echo "== CUK_MV_Q4TC=$v round $r" >> "$OUT/q4tc.md"
  CUK_MV_Q4TC=$v timeout 200 "$N/celer" bench --device cuda -m $q -p 0 -n 128 -r 3 -o md 2>&1 | grep -E '^\||rror' >> "$OUT/q4tc.md"
  stamp "q4 tg128 CUK_MV_Q4TC=$v round $r: $(grep -E 'tg128' "$OUT/q4tc.md" | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
done; done
CUK_MV_Q4TC=1 timeout 200 "$N/tests/cuda/test_cuda_precision" > "$OUT/precision-q4tc.log" 2>&1
stamp "test_cuda_precision with CUK_MV_Q4TC=1 rc=$? $(tail -n 1 "$OUT/precision-q4tc.log")"
[ "${SKIP_KV:-0}" = 1 ] && { cat "$OUT/times.txt"; exit 0; }
timeout 240 env OUT="$OUT" Q4=1 SHAPES=gpt-oss-20b REPS=2 bash bench/gpu/kvrec.sh "${1}" > "$OUT/kvrec-goss.log" 2>&1
stamp "kvrec gpt-oss-20b (MXFP4) rc=$? $(grep -E 'identical|FAILED' "$OUT/kvrec-gpt-oss-20b.md" 2>/dev/null | tr '\n' ' ')"
timeout 300 env OUT="$OUT" SYNTH=1 SHAPES=gemma4-12b REPS=2 bash bench/gpu/kvrec.sh "${1}" > "$OUT/kvrec-g12.log" 2>&1
stamp "kvrec gemma4-12b rc=$? $(grep -E 'identical|FAILED' "$OUT/kvrec-gemma4-12b.md" 2>/dev/null | tr '\n' ' ')"
tar -C "$OUT" -cJf "$OUT.tar.xz" . 2>/dev/null && mv "$OUT.tar.xz" "$OUT/all.tar.xz"
cat "$OUT/times.txt"
