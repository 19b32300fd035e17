#!/usr/bin/env bash
# session 11, call 2: decode-batch products timed in graphs (cuBLAS default vs cuBLASLt
# candidates), then the KV record's gpt-oss-20b rows with MXFP4 experts (pending.sh step 4a)
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11b.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; O=/tmp/r; mkdir -p $O
timeout 200 .gpu/new/bench_cuda_products 1,8,16,32,64 > $R/products.txt 2>&1; echo "products rc=$?"
grep '^|' $R/products.txt
timeout 300 env OUT="$O" Q4=1 SHAPES=gpt-oss-20b REPS=2 bash bench/gpu/kvrec.sh new > "$O/kvrec-goss.log" 2>&1
echo "kvrec gpt-oss-20b (MXFP4) rc=$? $(grep -E 'identical|FAILED' "$O/kvrec-gpt-oss-20b.md" 2>/dev/null | tr '\n' ' ')"
tar -C /tmp -cJf $R/r.tar.xz r
