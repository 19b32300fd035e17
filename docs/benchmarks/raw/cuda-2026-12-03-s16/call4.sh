#!/usr/bin/env bash
# session 16, call 4: the final tree (kernel_mv_q4g_x1 the default for 4-bit bf16-scale
# g>=64 rows of cols % 2048 == 0). Every GPU test; the kernel test checked to fail with
# the group kernel's second chunk scored against the first chunk's x; llama3-8b q4 and
# bf16 tg128 and q4 -npl 8,32 against base (call 1's main), interleaved; the group
# kernel's SASS for the next session's instruction count.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s16d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new; B=.gpu/base16
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
CUK_MV_X1CFG=r2u4 timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels-r2u4.log 2>&1; el "kernels r2u4 rc=$? $(tail -n 1 $O/kernels-r2u4.log)"
timeout 100 $N/tests/cuda/test_cuda_kernels_broken > $O/kernels-broken.log 2>&1; el "kernels broken rc=$? $(tail -n 1 $O/kernels-broken.log)"
grep -E "FAIL" $O/kernels*.log | head -6
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_qgemm test_cuda_kv test_cuda_sample test_cuda_precision; do
  timeout 200 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot fixtures rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
b() { # label, dir, args
  local l=$1 d=$2; shift 2
  timeout 100 $d/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
for round in 1 2; do
  for d in base new; do
    D=$B; [ $d = new ] && D=$N
    b l8q4-$d $D -m /tmp/l8q4 -p 0 -n 128 -r 3
    b l8-$d $D --synth llama3-8b -p 0 -n 128 -r 3
  done
done
for d in base new; do D=$B; [ $d = new ] && D=$N; b npl-$d $D -m /tmp/l8q4 -npl 8,32 -p 64 -n 64 -r 1; done
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass $N/libceler-cuda.so 2>/dev/null | awk '/Function : .*kernel_mv_q4g_x1/{p=1} p&&/Function : /&&!/q4g_x1/{p=0} p' > $O/sass-q4g.txt
  el "sass lines $(wc -l < $O/sass-q4g.txt)"
  grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z0-9_.]+' $O/sass-q4g.txt | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -20
fi
tar -C /tmp -cJf $OUT/r.tar.xz r
