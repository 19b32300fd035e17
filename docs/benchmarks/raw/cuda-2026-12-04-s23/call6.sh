#!/usr/bin/env bash
# session 23, call 6: the committed tree (the shared-memory opt-in helper in
# flash_attn.cu): every GPU test, llama3-8b bf16 pp512 / tg128 and -npl 8,32.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s23f.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
timeout 120 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm test_cuda_sample; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
timeout 120 $N/celer bench --device cuda --synth llama3-8b -p 512 -n 128 -r 3 -o md > $O/l8.md 2>&1; el "l8 rc=$? $(grep -E '^\| *[a-z0-9]' $O/l8.md | tail -n 2 | awk -F'|' '{printf "%s ", $(NF-1)}')"
timeout 150 $N/celer bench --device cuda --synth llama3-8b -npl 8,32 -p 64 -n 128 -c 32768 -r 1 -o md > $O/l8-npl.md 2>&1; el "l8-npl rc=$? $(grep -E '^\| +[0-9]' $O/l8-npl.md | tail -n 2 | awk -F'|' '{printf "%s ", $9}')"
tar -C /tmp -cJf $OUT/r.tar.xz r
