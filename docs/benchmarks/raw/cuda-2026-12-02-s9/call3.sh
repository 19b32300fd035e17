#!/usr/bin/env bash
# session 9, call 3: GPU tests on the rotating-cache run fix, gemma3-4b A/B, gpt-oss in place vs copying, KV record rows
set -u
O=/tmp/o3; mkdir -p $O
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB= NCCL_NVLS_ENABLE=0
N=.gpu/new
run() { local log=$1; shift; echo "== $*" >> $O/$log.log; timeout 150 "$@" >> $O/$log.log 2>&1; echo "rc=$?" >> $O/$log.log; }
rc=0
for t in "$N"/tests/cuda/test_cuda_kernels "$N"/tests/cuda/test_cuda_sample "$N"/tests/cuda/test_cuda_qgemm \
         "CELER_DEVICE=cuda $N/tests/test_fixtures_models" "$N"/tests/cuda/test_cuda_precision "$N"/tests/cuda/test_cuda_kv \
         "$N"/tests/cuda/test_cuda_graph "$N"/tests/cuda/test_cuda_decode "$N"/tests/cuda/test_cuda_batch \
         "CELER_DEVICE=cuda $N/tests/test_snapshot_fixtures" "CELER_DEVICE=cuda $N/tests/test_tp 1"; do
  echo "== $t" >> $O/tests.log; timeout 240 env $t >> $O/tests.log 2>&1; r=$?
  echo "$t: exit $r; $(tail -n 1 $O/tests.log)"; [ $r = 0 ] || rc=1
done
echo "tests rc=$rc"
for x in new base; do run g3ab .gpu/$x/celer bench --device cuda --synth gemma3-4b -npl 32 -p 2048 -n 128 -c 70000 -r 1 -o md; done
for x in new base; do run g3ab1 .gpu/$x/celer bench --device cuda --synth gemma3-4b -p 512 -n 128 -d 2048 -r 3 -o md; done
run g3stats env CELER_STATS=1 $N/celer bench --device cuda --synth gemma3-4b -npl 32 -p 2048 -n 16 -c 70000 -r 1 -o md
grep -E '^\|  |^== ' $O/g3ab.log $O/g3ab1.log; grep -E 'per forward' $O/g3stats.log; grep -m1 '^kv:' $O/g3stats.log
for p in fast exact; do for w in 1 0 1 0; do
  echo "tiny $p w=$w $(CELER_KV_INPLACE_WRITE=$w timeout 60 $N/celer generate --device cuda --precision $p -m tests/fixtures/models/gpt_oss --tokens-file .gpu/p200.txt -n 48 --temp 0 --ignore-eos 2>&1 | tail -n 1 | md5sum)"
done; done | tee $O/gptoss-tiny.txt
awk -v n=2048 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % 29997 } }' > /tmp/p2048.txt
for w in 1 1 0 0; do
  echo "20b w=$w $(CELER_KV_INPLACE_WRITE=$w timeout 100 $N/celer generate --device cuda --synth gpt-oss-20b --tokens-file /tmp/p2048.txt -n 12 --temp 0 --ignore-eos 2>&1 | tail -n 1)"
done | tee $O/gptoss-20b.txt
timeout 240 env SYNTH=1 SHAPES="gemma3-4b gemma4-e4b gemma4-12b" REPS=2 BENCH_TIMEOUT=120 OUT=$O bash bench/gpu/kvrec.sh new > $O/kvrec.log 2>&1
echo "kvrec rc=$?"; grep -E '^#|^\|  |identical|FAILED' $O/kvrec.log | tail -n 40
tar -C /tmp -cJf $OUT/o3.tar.xz o3
