#!/usr/bin/env bash
# session 10, call 4: bisecting gpt-oss-20b's run-to-run decode difference (T = 1
# forwards) by switches, with other shapes as controls; initcheck on two tokens.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c3.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O /tmp/lg
N=.gpu/new
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $O/times.txt; }
awk -v n=8 -v v=30000 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % (v - 3) } }' > $O/p8.txt
pair() { local tag=$1 shape=$2 e=$3; shift 3
  for ab in a b; do timeout 120 env $e $N/celer logits --device cuda --synth $shape --tokens-file $O/p8.txt --chunk 1 -o /tmp/lg/$tag-$ab.st "$@" > $O/lg-$tag-$ab.err 2>&1 || echo "$tag $ab failed: $(tail -n 2 $O/lg-$tag-$ab.err)"; done
  stamp "$tag ($shape, $e $*): $(python3 bench/gpu/logits_diff.py /tmp/lg/$tag-a.st /tmp/lg/$tag-b.st 2>&1 | tr '\n' ' ')"; }
pair base gpt-oss-20b X=1
pair block gpt-oss-20b CUDA_LAUNCH_BLOCKING=1
pair nograph gpt-oss-20b "CELER_GRAPH=0 CELER_PDL=0"
pair mvrows1 gpt-oss-20b CUK_MV_ROWS=1
pair nofuse gpt-oss-20b CELER_FUSE=0
pair t1 gpt-oss-20b X=1 -t 1
pair base2 gpt-oss-20b X=1
pair qwen qwen3-0.6b X=1
pair gemma3 gemma3-4b X=1
pair e4b gemma4-e4b X=1
python3 bench/gpu/logits_diff.py /tmp/lg/base-a.st /tmp/lg/base2-a.st | sed 's/^/base-a vs base2-a: /' | tee -a $O/times.txt
python3 bench/gpu/logits_diff.py /tmp/lg/base-a.st /tmp/lg/nograph-a.st | sed 's/^/base-a vs nograph-a: /' | tee -a $O/times.txt
python3 bench/gpu/logits_diff.py /tmp/lg/base-a.st /tmp/lg/block-a.st | sed 's/^/base-a vs block-a: /' | tee -a $O/times.txt
awk -v n=2 'BEGIN { printf "1000,2000" }' > $O/p2.txt
timeout 200 compute-sanitizer --tool initcheck --print-limit 30 $N/celer logits --device cuda --synth gpt-oss-20b --tokens-file $O/p2.txt --chunk 1 -o /tmp/lg/san.st > $O/san-initcheck.log 2>&1
stamp "initcheck rc=$? $(grep -E 'ERROR SUMMARY' $O/san-initcheck.log)"
grep -E "Uninitialized|at 0x|by thread|in .*kernel|Address" $O/san-initcheck.log | head -n 30
tar -C $OUT -cJf $OUT/r.tar.xz r
echo "=== times"; cat $O/times.txt
