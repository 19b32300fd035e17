#!/usr/bin/env bash
# session 11, call 4: decode attention with 4 (before), 8 or 16 warps a block
# (CUK_ATTN_WARPS, same binary): the GPU tests at the default (8) and the batch and
# graph tests at 16, then llama3-8b tg128, tg128 at depth 4096, -npl 8,32,128 and
# gemma3-4b tg128, the warp counts interleaved (4, 8, 16, 4, 8, 16 while time lasts)
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
for t in "$N/tests/cuda/test_cuda_kernels" "$N/tests/cuda/test_cuda_decode" "CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "$N/tests/cuda/test_cuda_precision" "$N/tests/cuda/test_cuda_graph" \
         "$N/tests/cuda/test_cuda_batch" \
         "CUK_ATTN_WARPS=16 $N/tests/cuda/test_cuda_batch" "CUK_ATTN_WARPS=16 $N/tests/cuda/test_cuda_graph" \
         "CUK_ATTN_WARPS=4 $N/tests/cuda/test_cuda_batch"; do
  f=$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_' | tail -c 60)
  timeout 200 env $t > "$O/$f.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$f.log" | head -n 6
done
for w in 4 8 16 4 8 16; do
  [ $(( $(date +%s) - t0 )) -gt 470 ] && { echo "time: stopped before W=$w"; break; }
  export CUK_ATTN_WARPS=$w
  for a in "tg|--synth llama3-8b -p 0 -n 128 -r 2" "d4096|--synth llama3-8b -d 4096 -p 0 -n 128 -r 2" \
           "npl|--synth llama3-8b -npl 8,32,128 -p 64 -n 128 -c 65536 -r 1" "g3|--synth gemma3-4b -p 0 -n 128 -r 2"; do
    n=${a%%|*}; timeout 120 $C bench --device cuda ${a#*|} -o md >> $O/$n-w$w.md 2>&1
    echo "[$(( $(date +%s) - t0 )) s] W=$w $n rc=$? $(grep -E '^\| (llama|gemma)|^\| +[0-9]' $O/$n-w$w.md | tail -n 3 | awk -F'|' '{print $(NF-1), $(NF-3)}' | tr '\n' ' ')"
  done
done
tar -C /tmp -cJf $R/r.tar.xz r
