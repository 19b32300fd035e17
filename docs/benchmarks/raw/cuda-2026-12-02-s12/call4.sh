#!/usr/bin/env bash
# session 12, call 4: small kernels that let the next kernel launch only after their own
# wait (CUK_PDL_LATE=1 build "late") against today's order (build "new"), each with and
# without the matrix-vector kernels' early L2 prefetch (CUK_MV_PREFETCH): GPU tests on
# "late", then interleaved A/B: llama3-8b tg128 (bf16, q4, depth 4096), gemma3-4b tg128,
# llama3-8b -npl 8,32.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s12c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new; L=.gpu/late
t0=$(date +%s)
for t in test_cuda_graph test_cuda_batch test_cuda_kernels test_cuda_decode; do
  # the tests load libceler-cuda.so from CELER_CUDA_LIB's default (next to the binary, then the build)
  timeout 200 env CELER_CUDA_LIB=$PWD/$L/libceler-cuda.so $N/tests/cuda/$t > "$O/late-$t.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] late $t rc=$r $(tail -n 1 "$O/late-$t.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/late-$t.log" | head -n 6
done
timeout 200 env CELER_CUDA_LIB=$PWD/$L/libceler-cuda.so CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/late-fixtures.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] late fixtures rc=$? $(tail -n 1 $O/late-fixtures.log)"
tg() { # $1 label, $2 build dir, rest: args
  local l=$1 b=$2; shift 2
  timeout 100 $b/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l rc=$? $(grep -E '^\| [a-z]' $O/$l.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
}
timeout 120 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth-q4.log 2>&1
for round in 1 2 3; do
  CUK_MV_PREFETCH=0 tg tg-new $N --synth llama3-8b -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=0 tg tg-late $L --synth llama3-8b -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=12 tg tg-late-pf12 $L --synth llama3-8b -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=24 tg tg-late-pf24 $L --synth llama3-8b -p 0 -n 128 -r 2
done
for round in 1 2; do
  CUK_MV_PREFETCH=0 tg q4-new $N -m /tmp/l8q4 -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=0 tg q4-late $L -m /tmp/l8q4 -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=24 tg q4-late-pf24 $L -m /tmp/l8q4 -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=0 tg g3-new $N --synth gemma3-4b -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=0 tg g3-late $L --synth gemma3-4b -p 0 -n 128 -r 2
  CUK_MV_PREFETCH=0 tg d4k-new $N --synth llama3-8b -p 0 -n 128 -d 4096 -r 1
  CUK_MV_PREFETCH=0 tg d4k-late $L --synth llama3-8b -p 0 -n 128 -d 4096 -r 1
  for b in new late; do
    timeout 100 .gpu/$b/celer bench --device cuda --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 65536 -r 1 -o md >> $O/npl-$b.md 2>&1
    echo "[$(( $(date +%s) - t0 )) s] npl $b rc=$? S_TG: $(grep -E '^\| +[0-9]' $O/npl-$b.md | tail -n 2 | awk -F'|' '{print $(NF-3)}' | tr '\n' ' ')"
  done
done
tar -C /tmp -cJf $R/r.tar.xz r
