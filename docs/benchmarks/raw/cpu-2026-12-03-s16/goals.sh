#!/bin/bash
# Issue 18's goals on this session's VM: qwen3-0.6b bf16 and q4, --precision fast,
# 2 threads, pp512 and tg128 (-r 2 each), five rounds at the avx512 level, then two at
# the forced avx2 level; the read bandwidth celer bench probes is logged beside each
# run (the VM's speed moves between states ~30% apart). Binary: main at the time.
cd /work/main
C=${C:-build-np/celer}
grep -m1 "model name" /proc/cpuinfo; grep -m1 "cpu family" /proc/cpuinfo
run() { # level model round
  local f=/tmp/c16/$1-$2-$3.md
  CELER_CPU=$1 $C bench --device cpu -m /tmp/$2 -p 512 -n 128 -t 2 --precision fast -r 2 -o md > $f 2>&1
  echo "$1 $2 round $3: pp512 $(grep -E 'pp512 ' $f | head -1 | awk -F'|' '{print $(NF-1)}' | tr -s ' ') tg128 $(grep -E 'tg128 ' $f | head -1 | awk -F'|' '{print $(NF-1)}' | tr -s ' ') $(grep -o 'read bandwidth.*' $f | head -1 | sed 's/.*: /bw /')"
}
for r in 1 2 3 4 5; do for m in q06 q06q4; do run avx512 $m $r; done; done
for r in 1 2; do for m in q06 q06q4; do run avx2 $m $r; done; done
