#!/bin/bash
# Issue 18's "no regression at the forced avx2 level": the tree before the CPU levels
# (e5b31c1, AVX2+FMA only; built as /tmp/old18/build-old/celer) against main forced to
# avx2 (exact, and --precision fast), qwen3-0.6b bf16 and q4, 2 threads, pp512 and
# tg128 (-r 2), three alternations; the read bandwidth beside each run.
cd /work/main
O=/tmp/old18/build-old/celer; N=${N:-build-np/celer}
run() { # label cmd... (model appended)
  local l=$1; shift
  for m in q06 q06q4; do
    f=/tmp/c16/avx2ab-$l-$m-$r.md
    "$@" -m /tmp/$m -p 512 -n 128 -t 2 -r 2 -o md > $f 2>&1
    echo "$l $m round $r: $(grep -E 'pp512 |tg128 ' $f | awk -F'|' '{print $(NF-2), $(NF-1)}' | tr -s ' ' | tr '\n' ' ') bw $(grep -o 'read bandwidth[^:]*: [0-9.]*' $f | head -1 | sed 's/.*: //')"
  done
}
for r in 1 2 3; do
  run old $O bench
  run avx2-exact env CELER_CPU=avx2 $N bench --device cpu
  run avx2-fast env CELER_CPU=avx2 $N bench --device cpu --precision fast
done
