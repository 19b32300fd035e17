#!/usr/bin/env bash
# bench/gpu/npl_ab.sh NEW BASE: an A/B of batched and deep decode in one GPU call, run
# from the repository root after unpacking bench/gpu/pack.sh's archive into .gpu/
# (NEW/, BASE/, lib/), for a change to the decode attention kernels:
#   1. `celer bench -npl 1,8,32,128` on llama3-8b, NEW and BASE interleaved, ROUNDS times;
#   2. deep decode on one sequence: llama3-8b tg128 at depth 4,096, NEW and BASE;
#   3. attention-bound batches: gemma3-4b and llama3-8b -npl 32 with 2,048-token prompts;
#   4. CELER_PROFILE=1 (each op timed alone, graphs off) of -npl 8,32 for NEW and BASE.
# Logs in $OUT: npl-ab.md, deep.md, long.md, prof-NEW.log, prof-BASE.log.
set -u
NEW=$1 BASE=$2
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
rc=0
c() { local x=$1; shift; echo "== $x $*"; timeout 200 ".gpu/$x/celer" "$@" 2>&1 | grep -E '^\||rror|^model' || { echo "FAILED: $x $*"; rc=1; }; }
for r in $(seq 1 "${ROUNDS:-2}"); do
  for x in "$NEW" "$BASE"; do
    c "$x" bench --device cuda --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1 -o md >> "$OUT/npl-ab.md"
  done
done
for x in "$NEW" "$BASE"; do
  c "$x" bench --device cuda --synth llama3-8b -p 0 -n 128 -d 4096 -r 3 -o md >> "$OUT/deep.md"
done
for x in "$NEW" "$BASE"; do
  for s in gemma3-4b llama3-8b; do
    c "$x" bench --device cuda --synth $s -npl 32 -p 2048 -n 128 -c 70000 -r 1 -o md >> "$OUT/long.md"
  done
done
for x in "$NEW" "$BASE"; do
  CELER_PROFILE=1 timeout 200 ".gpu/$x/celer" bench --device cuda --synth llama3-8b -npl 8,32 -p 64 -n 32 -c 8192 -r 1 -o md \
    > "$OUT/prof-$x.log" 2>&1 || { echo "FAILED: profile $x"; rc=1; }
done
cat "$OUT/npl-ab.md" "$OUT/deep.md" "$OUT/long.md"
exit $rc
