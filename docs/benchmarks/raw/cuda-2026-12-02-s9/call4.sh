#!/usr/bin/env bash
# session 9, call 4: is gpt-oss on the GPU deterministic run to run? (tiny MXFP4 fixture, then the 20b shape on disk)
set -u
O=/tmp/o4; mkdir -p $O
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
N=.gpu/new/celer
F=tests/fixtures/models/gpt_oss-mxfp4
for i in 1 2 3; do echo "tiny-mxfp4 gen $i $(timeout 60 $N generate --device cuda -m $F --tokens-file .gpu/p200.txt -n 48 --temp 0 --ignore-eos 2>&1 | tail -n 1 | md5sum)"; done | tee $O/det.txt
for i in 1 2; do timeout 60 $N logits --device cuda -m $F --tokens-file .gpu/p200.txt --chunk 7 -o $O/tiny-$i.st > /dev/null 2>&1; done
cmp $O/tiny-1.st $O/tiny-2.st && echo "tiny-mxfp4 logits chunk 7: identical" | tee -a $O/det.txt || echo "tiny-mxfp4 logits chunk 7: DIFFER" | tee -a $O/det.txt
awk -v n=2048 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % 29997 } }' > /tmp/p2048.txt
cut -d, -f1-600 /tmp/p2048.txt > /tmp/p600.txt
( time timeout 120 $N synth --shape gpt-oss-20b -o /tmp/g20 ) > $O/synth.log 2>&1; tail -n 3 $O/synth.log
for i in 1 2; do timeout 60 $N logits --device cuda -m /tmp/g20 --tokens-file /tmp/p600.txt --chunk 512 -o $O/p-$i.st > $O/lp-$i.log 2>&1; done
cmp $O/p-1.st $O/p-2.st && echo "20b logits 600 tokens chunk 512: identical" | tee -a $O/det.txt || echo "20b logits chunk 512: DIFFER" | tee -a $O/det.txt
for i in 1 2; do timeout 90 $N logits --device cuda -m /tmp/g20 --tokens-file /tmp/p600.txt --chunk 1 -o $O/d-$i.st > $O/ld-$i.log 2>&1; done
cmp $O/d-1.st $O/d-2.st && echo "20b logits 600 tokens chunk 1: identical" | tee -a $O/det.txt || echo "20b logits chunk 1: DIFFER ($(cmp $O/d-1.st $O/d-2.st | head -n 1))" | tee -a $O/det.txt
for i in 1 2 3; do echo "20b gen $i $(timeout 60 $N generate --device cuda -m /tmp/g20 --tokens-file /tmp/p2048.txt -n 12 --temp 0 --ignore-eos 2>&1 | tail -n 1)"; done | tee -a $O/det.txt
for i in 1 2; do echo "20b gen exact $i $(timeout 60 $N generate --device cuda --precision exact -m /tmp/g20 --tokens-file /tmp/p2048.txt -n 12 --temp 0 --ignore-eos 2>&1 | tail -n 1)"; done | tee -a $O/det.txt
python3 - <<'PY' 2>&1 | tee -a $O/det.txt
import struct, json, numpy as np
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n])
    k = [x for x in h if x != '__metadata__'][0]; o = h[k]['data_offsets']
    return np.frombuffer(b[8+n+o[0]:8+n+o[1]], dtype=np.float32).reshape(h[k]['shape'])
for a, c in (('p-1', 'p-2'), ('d-1', 'd-2')):
    try:
        x1, x2 = load('/tmp/o4/%s.st' % a), load('/tmp/o4/%s.st' % c)
        rows = np.nonzero((x1 != x2).any(axis=1))[0]
        print(a, c, 'shape', x1.shape, 'rows differing', len(rows), 'first', rows[:5].tolist(), 'max diff', float(np.abs(x1 - x2).max()))
    except Exception as e: print(a, c, 'error', e)
PY
rm -rf /tmp/g20; rm -f $O/*.st
tar -C /tmp -cJf $OUT/o4.tar.xz o4
