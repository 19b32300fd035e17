#!/usr/bin/env bash
# session 11, call 5: the decode attention's warps chosen by grid size (CUK_ATTN_WARPS=0,
# the new default) against 4 forced (the kernels before this session): the GPU tests,
# then llama3-8b -npl 1,8,32,128 and tg128, interleaved, two rounds
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
for t in "$N/tests/cuda/test_cuda_kernels" "$N/tests/cuda/test_cuda_decode" "CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "$N/tests/cuda/test_cuda_precision" "$N/tests/cuda/test_cuda_kv" "$N/tests/cuda/test_cuda_graph" \
         "$N/tests/cuda/test_cuda_batch" "CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures"; do
  f=$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_' | tail -c 60)
  timeout 200 env $t > "$O/$f.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$f.log" | head -n 6
done
for w in 0 4 0 4; do
  export CUK_ATTN_WARPS=$w
  timeout 120 $C bench --device cuda --synth llama3-8b -npl 1,8,32,128 -p 64 -n 128 -c 65536 -r 1 -o md >> $O/npl-w$w.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] W=$w npl rc=$? S_TG: $(grep -E '^\| +[0-9]' $O/npl-w$w.md | tail -n 4 | awk -F'|' '{print $(NF-3)}' | tr '\n' ' ')"
  timeout 120 $C bench --device cuda --synth llama3-8b -p 0 -n 128 -r 2 -o md >> $O/tg-w$w.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] W=$w tg128 rc=$? $(grep -E '^\| llama' $O/tg-w$w.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
done
tar -C /tmp -cJf $R/r.tar.xz r
