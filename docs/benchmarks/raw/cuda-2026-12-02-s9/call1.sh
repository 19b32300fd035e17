#!/usr/bin/env bash
# session 9, call 1: attnwalk16 tests + A/B, then profiles of gemma3-4b and llama3-8b q4 decode
set -u
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.gpu/lib
export CELER_CUDA_LIB= NCCL_NVLS_ENABLE=0
( QUICK=1 bash bench/gpu/merged.sh new > "$OUT/merged.log" 2>&1; echo "merged rc=$?" >> "$OUT/merged.log" )
tail -n 30 "$OUT/merged.log"
( ROUNDS=2 bash bench/gpu/npl_ab.sh new base > "$OUT/npl_ab.log" 2>&1; echo "npl_ab rc=$?" >> "$OUT/npl_ab.log" )
cat "$OUT/npl_ab.log"
for x in new; do
  timeout 120 .gpu/$x/celer bench --device cuda --synth gemma3-4b -p 512 -n 128 -r 3 -o md > "$OUT/g3-bench.md" 2>&1
  CELER_PROFILE=1 timeout 120 .gpu/$x/celer bench --device cuda --synth gemma3-4b -p 0 -n 64 -r 1 -o md > "$OUT/g3-prof.log" 2>&1
  CELER_PROFILE=1 timeout 120 .gpu/$x/celer bench --device cuda --synth llama3-8b -p 0 -n 64 -r 1 -o md > "$OUT/l3-prof.log" 2>&1
  timeout 120 .gpu/$x/celer synth --shape llama3-8b --q4 -o /tmp/l3q4 > /dev/null 2>&1
  timeout 120 .gpu/$x/celer bench --device cuda -m /tmp/l3q4 -p 512 -n 128 -r 3 -o md > "$OUT/l3q4-bench.md" 2>&1
  CELER_PROFILE=1 timeout 120 .gpu/$x/celer bench --device cuda -m /tmp/l3q4 -p 0 -n 64 -r 1 -o md > "$OUT/l3q4-prof.log" 2>&1
done
cat "$OUT/g3-bench.md" "$OUT/l3q4-bench.md"
echo "== done"
