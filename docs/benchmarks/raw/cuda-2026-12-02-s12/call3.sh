#!/usr/bin/env bash
# session 12, call 3: early L2 prefetch in the matrix-vector kernels (CUK_MV_PREFETCH=MiB,
# issued before each product waits for the kernel ahead of it): GPU tests with it on,
# A/B in one binary interleaved (llama3-8b tg128 bf16 and q4, gemma3-4b tg128, -npl 2,4);
# then the KV record's missing gpt-oss-20b rows (copying arm at 32 sequences, outputs).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s12b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; C=$N/celer
t0=$(date +%s)
for t in "CUK_MV_PREFETCH=24 $N/tests/cuda/test_cuda_graph" "CUK_MV_PREFETCH=24 $N/tests/cuda/test_cuda_kernels" \
         "CUK_MV_PREFETCH=24 $N/tests/cuda/test_cuda_decode" "CUK_MV_PREFETCH=24 CELER_DEVICE=cuda $N/tests/test_fixtures_models" \
         "CUK_MV_PREFETCH=24 $N/tests/cuda/test_cuda_batch"; do
  f=$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_' | tail -c 60)
  timeout 200 env $t > "$O/$f.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] $t rc=$r $(tail -n 1 "$O/$f.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/$f.log" | head -n 6
done
tg() { # $1 label, rest: args
  local l=$1; shift
  timeout 100 $C bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l rc=$? $(grep -E '^\| [a-z]' $O/$l.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
}
timeout 120 $C synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth-q4.log 2>&1
for round in 1 2; do
  for pf in 0 12 24 40; do CUK_MV_PREFETCH=$pf tg tg-pf$pf --synth llama3-8b -p 0 -n 128 -r 2; done
  for pf in 0 24; do CUK_MV_PREFETCH=$pf tg q4-pf$pf -m /tmp/l8q4 -p 0 -n 128 -r 2; done
  for pf in 0 24; do CUK_MV_PREFETCH=$pf tg g3-pf$pf --synth gemma3-4b -p 0 -n 128 -r 2; done
  for pf in 0 24; do CUK_MV_PREFETCH=$pf tg d4k-pf$pf --synth llama3-8b -p 0 -n 128 -d 4096 -r 1; done
  for pf in 0 24; do
    CUK_MV_PREFETCH=$pf timeout 100 $C bench --device cuda --synth llama3-8b -npl 2,4 -p 64 -n 128 -c 65536 -r 1 -o md >> $O/npl-pf$pf.md 2>&1
    echo "[$(( $(date +%s) - t0 )) s] npl pf=$pf rc=$? S_TG: $(grep -E '^\| +[0-9]' $O/npl-pf$pf.md | tail -n 2 | awk -F'|' '{print $(NF-3)}' | tr '\n' ' ')"
  done
done
rm -rf /tmp/l8q4
timeout $(( 585 - ($(date +%s) - t0) )) env OUT=$O/kv Q4=1 SHAPES=gpt-oss-20b REPS=1 ONE_ARMS= NPL_ARMS=0 BENCH_TIMEOUT=280 bash bench/gpu/kvrec.sh new > $O/kv-gpt-oss.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] kvrec gpt-oss-20b rc=$?"; tail -n 8 $O/kv-gpt-oss.log
tar -C /tmp -cJf $R/r.tar.xz r
