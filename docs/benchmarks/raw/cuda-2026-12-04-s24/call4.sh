#!/usr/bin/env bash
# session 24, call 4: test_cuda_graph again, its profile_parts test with step graphs on
# (call 3's run of it inherited CELER_GRAPH=0 from the test before it).
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s24d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 300 $N/tests/cuda/test_cuda_graph > "$O/test_cuda_graph.log" 2>&1; el "test_cuda_graph rc=$? $(tail -n 1 $O/test_cuda_graph.log)"
grep -E "  CELER_PROFILE|FAIL|profile_parts" $O/test_cuda_graph.log | head -14
tar -C /tmp -cJf $OUT/r.tar.xz r
