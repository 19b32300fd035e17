#!/usr/bin/env bash
# session 10, call 5: gpt-oss-20b's run-to-run decode difference by config variants of
# one synthesized MXFP4 checkpoint (experts top-k, window, rope scaling, layer count).
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c3.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O /tmp/lg
N=.gpu/new
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/times.txt; }
echo "1000,2000,3000,4000,5000,6000" > $O/p6.txt
$N/celer synth --shape gpt-oss-20b --q4 -o /tmp/goss > $O/synth.log 2>&1; stamp "synth rc=$?"
python3 -c "import json;c=json.load(open('/tmp/goss/config.json'));print({k:c[k] for k in c if 'layer' in k or 'expert' in k or 'window' in k or 'rope' in k})" | tee -a $O/times.txt
pair() { local tag=$1 d=$2; shift 2
  for ab in a b; do timeout 120 $N/celer logits --device cuda -m $d --tokens-file $O/p6.txt --chunk 1 -o /tmp/lg/$tag-$ab.st "$@" > $O/lg-$tag-$ab.err 2>&1 || echo "$tag $ab failed: $(tail -n 2 $O/lg-$tag-$ab.err)"; done
  stamp "$tag $*: $(python3 bench/gpu/logits_diff.py /tmp/lg/$tag-a.st /tmp/lg/$tag-b.st 2>&1 | tr '\n' ' ')"; }
variant() { local tag=$1 py=$2; rm -rf /tmp/v-$tag; mkdir -p /tmp/v-$tag; ln -s /tmp/goss/model.safetensors /tmp/v-$tag/
  python3 -c "import json;c=json.load(open('/tmp/goss/config.json'));$py;json.dump(c,open('/tmp/v-$tag/config.json','w'))"
  pair $tag /tmp/v-$tag; }
pair mxfp4 /tmp/goss
pair mxfp4-prefill /tmp/goss --chunk 6
variant top1 "c['num_experts_per_tok']=1"
variant nowin "c['layer_types']=['full_attention']*len(c['layer_types']); c['sliding_window']=None"
variant norope "c['rope_scaling']=None"
variant l1 "c['num_hidden_layers']=1; c['layer_types']=c['layer_types'][:1]"
variant l2 "c['num_hidden_layers']=2; c['layer_types']=c['layer_types'][:2]"
variant l2full "c['num_hidden_layers']=2; c['layer_types']=['full_attention']*2"
tar -C $OUT -cJf $OUT/r.tar.xz r
echo "=== times"; cat $O/times.txt
