#!/usr/bin/env bash
# session 9, call 2: why gemma3-4b at 32 sequences past its window is slow (profiles, stats), then the KV record's missing shapes
set -u
O=/tmp/o2; mkdir -p $O
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
B=.gpu/new/celer
run() { local log=$1; shift; echo "== $*" >> $O/$log.log; ( time timeout 150 "$@" ) >> $O/$log.log 2>&1; echo "rc=$?" >> $O/$log.log; }
run g3-long-prof env CELER_PROFILE=1 $B bench --device cuda --synth gemma3-4b -npl 32 -p 2048 -n 16 -c 70000 -r 1 -o md
run g3-short-prof env CELER_PROFILE=1 $B bench --device cuda --synth gemma3-4b -npl 32 -p 512 -n 16 -c 70000 -r 1 -o md
run g3-deep-prof env CELER_PROFILE=1 $B bench --device cuda --synth gemma3-4b -p 0 -n 32 -d 2048 -r 1 -o md
run g3-long-stats env CELER_STATS=1 $B bench --device cuda --synth gemma3-4b -npl 32 -p 2048 -n 16 -c 70000 -r 1 -o md
run g3-long-1024 $B bench --device cuda --synth gemma3-4b -npl 32 -p 1024 -n 32 -c 70000 -r 1 -o md
run g3-long-1536 $B bench --device cuda --synth gemma3-4b -npl 32 -p 1536 -n 32 -c 70000 -r 1 -o md
run g3-long-b8 $B bench --device cuda --synth gemma3-4b -npl 8 -p 2048 -n 32 -c 70000 -r 1 -o md
tail -n 25 $O/g3-long-prof.log; tail -n 14 $O/g3-deep-prof.log; grep -E '^\|  ' $O/g3-long-1024.log $O/g3-long-1536.log $O/g3-long-b8.log
timeout 400 env SYNTH=1 SHAPES="gpt-oss-20b gemma4-e4b gemma4-12b" REPS=2 BENCH_TIMEOUT=150 OUT=$O bash bench/gpu/kvrec.sh new > $O/kvrec.log 2>&1
echo "kvrec rc=$?"; cat $O/kvrec.log | tail -n 60
tar -C /tmp -cJf $OUT/o2.tar.xz o2
