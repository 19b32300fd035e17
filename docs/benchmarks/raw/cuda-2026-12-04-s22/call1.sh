#!/usr/bin/env bash
# session 22, call 1: the CPU's bf16 KV cache and 4-bit rows interleaved by 16 (q4r16):
# every GPU test (shared code: precision, sessions, weights), the CPU tests of both on
# this host's processor, the CPU goal's A/B on this host (2 threads), a GPU sanity row.
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/r
tar -C .gpu -xJf .gpu/s22a.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $O/smi.txt 2>&1
lscpu > $O/lscpu.txt 2>&1
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch test_cuda_kv test_cuda_qgemm test_cuda_sample; do
  timeout 300 $N/tests/cuda/$t > "$O/$t.log" 2>&1; el "$t rc=$? $(tail -n 1 $O/$t.log)"
done
timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures.log 2>&1; el "fixtures rc=$? $(tail -n 1 $O/fixtures.log)"
timeout 200 env CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures > $O/snapshot.log 2>&1; el "snapshot rc=$? $(tail -n 1 $O/snapshot.log)"
timeout 200 $N/tests/cuda/test_cuda_precision > $O/precision.log 2>&1; el "precision rc=$? $(tail -n 1 $O/precision.log)"
for t in test_matmul_fast test_attention_levels test_kv_cache test_cpu_precision; do
  timeout 200 env CELER_DEVICE=cpu $N/tests/$t > "$O/cpu-$t.log" 2>&1; el "cpu $t rc=$? $(tail -n 1 $O/cpu-$t.log)"
done
timeout 100 env CELER_DEVICE=cpu $N/tests/test_snapshot_fixtures > $O/cpu-snapshot.log 2>&1; el "cpu snapshot rc=$? $(tail -n 1 $O/cpu-snapshot.log)"
timeout 150 $N/celer synth --shape qwen3-0.6b --q4 -o /tmp/q06q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2 3; do
  for pk in 1 0; do
    CELER_CPU_PACK=$pk timeout 100 $N/celer bench --device cpu -m /tmp/q06q4 -npl 1,8 -p 64 -n 128 -t 2 --precision fast >> $O/cpu-npl-pack$pk.md 2>&1
    el "cpu npl pack=$pk rc=$? $(grep -E '^\|' $O/cpu-npl-pack$pk.md | tail -n 2 | awk -F'|' '{printf "%s ", $(NF-3)}')"
  done
done
for pk in 1 0; do
  CELER_CPU_PACK=$pk CELER_PRECISION=fast timeout 100 $N/bench_batch -m /tmp/q06q4 -t 1 -c -b 1,8 -p 64 -n 32 > $O/cpu-bb-pack$pk.txt 2>&1
  el "bench_batch pack=$pk rc=$? $(tail -n 1 $O/cpu-bb-pack$pk.txt)"
done
timeout 100 $N/bench_mm -t 1 -f q4 -P fast -p 8 -c -r 5 > $O/cpu-mm-w16.txt 2>&1; el "bench_mm q4w16 $(grep '^layer' $O/cpu-mm-w16.txt)"
timeout 100 $N/bench_mm -t 1 -f q4 -P fast -p 8 -c -r 5 -k > $O/cpu-mm-r16.txt 2>&1; el "bench_mm q4r16 $(grep '^layer' $O/cpu-mm-r16.txt)"
for k in f32 bf16; do timeout 60 $N/bench_attn -T 1 -d 4096 -r 21 -k $k >> $O/cpu-attn.txt 2>&1; done; el "attn $(cat $O/cpu-attn.txt | awk '{print $8, $9}' | tr '\n' ' ')"
timeout 120 $N/celer bench --device cuda --synth llama3-8b -p 512 -n 128 -r 3 -o md > $O/l8.md 2>&1; el "l8 rc=$? $(grep -E '^\| *[a-z0-9]' $O/l8.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
tar -C /tmp -cJf $OUT/r.tar.xz r
