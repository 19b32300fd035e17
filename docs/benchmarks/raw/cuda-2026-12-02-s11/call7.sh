#!/usr/bin/env bash
# session 11, call 7: the KV row write folded into q/k norm + RoPE (CUK_FUSE_KV_WRITE=1,
# the new default) against apart (=0), the same binary: the GPU tests, then llama3-8b
# -npl 1,8,32,128, tg128 and gemma3-4b tg128 interleaved, two rounds, and a profile
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
for t in "$N/tests/cuda/test_cuda_decode" "$N/tests/cuda/test_cuda_kernels" "CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "$N/tests/cuda/test_cuda_precision" "$N/tests/cuda/test_cuda_kv" "$N/tests/cuda/test_cuda_graph" \
         "$N/tests/cuda/test_cuda_batch" "CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures"; do
  f=$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_' | tail -c 60)
  timeout 200 env $t > "$O/$f.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$f.log" | head -n 6
done
for f in 1 0 1 0; do
  export CUK_FUSE_KV_WRITE=$f
  timeout 120 $C bench --device cuda --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1 -o md >> $O/npl-f$f.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] FUSE=$f npl rc=$? S_TG: $(grep -E '^\| +[0-9]' $O/npl-f$f.md | tail -n 4 | awk -F'|' '{print $(NF-3)}' | tr '\n' ' ')"
  timeout 120 $C bench --device cuda --synth llama3-8b -p 0 -n 128 -r 2 -o md >> $O/tg-f$f.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] FUSE=$f tg128 rc=$? $(grep -E '^\| llama' $O/tg-f$f.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
  timeout 120 $C bench --device cuda --synth gemma3-4b -p 0 -n 128 -r 2 -o md >> $O/g3-f$f.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] FUSE=$f gemma3-4b tg128 rc=$? $(grep -E '^\| gemma' $O/g3-f$f.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
done
unset CUK_FUSE_KV_WRITE
CELER_PROFILE=2 timeout 60 $C bench --device cuda --synth llama3-8b -p 0 -n 32 -r 1 -o md > $O/prof-1.md 2>&1
grep -A12 "cuda profile" $O/prof-1.md
tar -C /tmp -cJf $R/r.tar.xz r
