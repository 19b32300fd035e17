#!/usr/bin/env bash
# session 10, call 3: gpt-oss-20b run-to-run logits (prefill and decode, fast and exact),
# llama3-8b decode logits twice (control), compute-sanitizer on the tiny gpt_oss
# fixture, then the KV record for gemma4-e4b and gemma4-12b.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c3.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O /tmp/lg
N=.gpu/new
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/times.txt; }
ids() { awk -v n=$1 -v v=30000 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % (v - 3) } }'; }
ids 100 > $O/p100.txt; ids 40 > $O/p40.txt
L() { local tag=$1 shape=$2 p=$3; shift 3
  timeout 120 $N/celer logits --device cuda --synth $shape --tokens-file $p -o /tmp/lg/$tag.st "$@" > $O/lg-$tag.err 2>&1
  stamp "logits $tag rc=$?"; }
cmpl() { echo "$1 vs $2: $(python3 bench/gpu/logits_diff.py /tmp/lg/$1.st /tmp/lg/$2.st 2>&1 | tr '\n' ' ')" | tee -a $O/diff.txt; }
L pre-a gpt-oss-20b $O/p100.txt; L pre-b gpt-oss-20b $O/p100.txt; L pre-c gpt-oss-20b $O/p100.txt
cmpl pre-a pre-b; cmpl pre-a pre-c
L dec-a gpt-oss-20b $O/p40.txt --chunk 1; L dec-b gpt-oss-20b $O/p40.txt --chunk 1
cmpl dec-a dec-b
L xpre-a gpt-oss-20b $O/p100.txt --precision exact; L xpre-b gpt-oss-20b $O/p100.txt --precision exact
cmpl xpre-a xpre-b
L xdec-a gpt-oss-20b $O/p40.txt --chunk 1 --precision exact; L xdec-b gpt-oss-20b $O/p40.txt --chunk 1 --precision exact
cmpl xdec-a xdec-b
L lpre-a llama3-8b $O/p100.txt; L lpre-b llama3-8b $O/p100.txt; cmpl lpre-a lpre-b
L ldec-a llama3-8b $O/p40.txt --chunk 1; L ldec-b llama3-8b $O/p40.txt --chunk 1; cmpl ldec-a ldec-b
F=tests/fixtures/models/gpt_oss
for tool in initcheck racecheck memcheck; do
  timeout 150 compute-sanitizer --tool $tool --print-limit 20 $N/celer generate --device cuda -m $F --tokens-file $O/p40.txt -n 8 --temp 0 --ignore-eos \
    > $O/san-$tool.log 2>&1
  stamp "sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san-$tool.log | tr '\n' ' ')"
done
timeout 300 env OUT=$O SYNTH=1 SHAPES="gemma4-e4b gemma4-12b" REPS=2 bash bench/gpu/kvrec.sh new > $O/kvrec.log 2>&1
stamp "kvrec rc=$?"
tar -C $OUT -cJf $OUT/r.tar.xz r
echo "=== diff"; cat $O/diff.txt; echo "=== kvrec"; tail -n 30 $O/kvrec.log; echo "=== times"; cat $O/times.txt
