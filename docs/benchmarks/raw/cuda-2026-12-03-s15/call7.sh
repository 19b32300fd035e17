#!/usr/bin/env bash
# session 15, call 7: the fused kernel with 32-token tiles for T <= 32 and the codes
# loaded two steps ahead (pf2), against q (c78f680). Tests on pf2, the kernel
# benchmark, then llama3-8b q4 -npl 8,32 and pp512/tg128, interleaved, two rounds.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s15f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r7; mkdir -p $O; N=.gpu/pf2
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 120 $N/tests/cuda/test_cuda_qgemm --bench > $O/qgemm.log 2>&1; el "qgemm rc=$? $(tail -n 1 $O/qgemm.log)"
grep -E "FAIL" $O/qgemm.log | head -5
grep -E "^\| .*\| (8|32|64) \|" $O/qgemm.log | head -40
for t in test_cuda_kernels test_cuda_batch test_cuda_graph test_cuda_decode; do
  timeout 100 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 100 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 100 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, build, args
  local l=$1 a=$2; shift 2
  timeout 100 .gpu/$a/celer bench --device cuda "$@" -o md >> $O/$l-$a.md 2>&1
  el "$l $a rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l-$a.md | tail -n 2 | awk -F'|' '{printf "%s ", ($3 ~ /[0-9]/ ? $(NF-3) : $(NF-1))}')"
}
for round in 1 2; do
  for a in q pf2; do
    [ $(( $(date +%s) - t0 )) -gt 330 ] && break 2
    b l8q4-npl $a -m /tmp/l8q4 -npl 8,32 -p 64 -n 128 -r 1
    b l8q4 $a -m /tmp/l8q4 -p 512 -n 128 -r 2
  done
done
tar -C /tmp -cJf $OUT/r.tar.xz r7
