#!/usr/bin/env bash
# session 10, call 6: gpt-oss-20b decode determinism: bf16 experts read from a file
# against the same shape filled on the device, and MXFP4 filled on the device.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c3.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O /tmp/lg
N=.gpu/new
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/times.txt; }
echo "1000,2000,3000,4000,5000,6000" > $O/p6.txt
$N/celer synth --shape gpt-oss-20b -o /tmp/gb > $O/synth.log 2>&1; stamp "synth bf16 rc=$? $(du -sh /tmp/gb | cut -f1)"
$N/celer synth --shape gpt-oss-20b --q4 -o /tmp/gq >> $O/synth.log 2>&1; stamp "synth q4 rc=$?"
pair() { local tag=$1 e=$2; shift 2
  for ab in a b; do timeout 150 env $e $N/celer logits --device cuda --tokens-file $O/p6.txt --chunk 1 -o /tmp/lg/$tag-$ab.st "$@" > $O/lg-$tag-$ab.err 2>&1 || echo "$tag $ab failed: $(tail -n 2 $O/lg-$tag-$ab.err)"; done
  stamp "$tag ($e $*): $(python3 bench/gpu/logits_diff.py /tmp/lg/$tag-a.st /tmp/lg/$tag-b.st 2>&1 | tr '\n' ' ')"; }
pair bf16file X=1 -m /tmp/gb
pair bf16fill CELER_SYNTH_FILL=1 -m /tmp/gb
pair q4fill CELER_SYNTH_FILL=1 -m /tmp/gq
pair q4file X=1 -m /tmp/gq
pair synth X=1 --synth gpt-oss-20b
pair bf16file-exact X=1 -m /tmp/gb --precision exact
tar -C $OUT -cJf $OUT/r.tar.xz r
echo "=== times"; cat $O/times.txt
