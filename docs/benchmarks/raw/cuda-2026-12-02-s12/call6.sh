#!/usr/bin/env bash
# session 12, call 6: which small kernels' launch order gives gemma3-4b its gain (call 4:
# +8% with ops.cu's kernels all "late"): builds with CUK_PDL_LATE = 1 (norms), 4 (GLU),
# 16 (decode attention, flash attention and its merge included), 63 (all) against
# today's order ("new"); GPU tests on l63; tg128 of gemma3-4b, llama3-8b and its q4,
# two rounds interleaved.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s12e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
for t in test_cuda_graph test_cuda_batch test_cuda_decode; do
  timeout 200 env CELER_CUDA_LIB=$PWD/.gpu/l63/libceler-cuda.so $N/tests/cuda/$t > "$O/l63-$t.log" 2>&1; r=$?
  echo "[$(( $(date +%s) - t0 )) s] l63 $t rc=$r $(tail -n 1 "$O/l63-$t.log")"
  [ $r = 0 ] || grep -E "FAIL" "$O/l63-$t.log" | head -n 6
done
timeout 200 env CELER_CUDA_LIB=$PWD/.gpu/l63/libceler-cuda.so CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/l63-fixtures.log 2>&1
echo "[$(( $(date +%s) - t0 )) s] l63 fixtures rc=$? $(tail -n 1 $O/l63-fixtures.log)"
tg() { # $1 label, $2 build, rest: args
  local l=$1 b=$2; shift 2
  timeout 100 .gpu/$b/celer bench --device cuda "$@" -o md >> $O/$l-$b.md 2>&1
  echo "[$(( $(date +%s) - t0 )) s] $l $b rc=$? $(grep -E '^\| [a-z]' $O/$l-$b.md | tail -n 1 | awk -F'|' '{print $(NF-1)}')"
}
timeout 120 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth-q4.log 2>&1
for round in 1 2; do
  for b in new l1 l4 l16 l63; do
    tg g3 $b --synth gemma3-4b -p 0 -n 128 -r 2
    tg l8 $b --synth llama3-8b -p 0 -n 128 -r 2
    tg q4 $b -m /tmp/l8q4 -p 0 -n 128 -r 2
  done
done
tar -C /tmp -cJf $R/r.tar.xz r
