#!/usr/bin/env bash
# session 11, call 1: bench/gpu/pending.sh steps 1-3 (GPU tests, gpt-oss fix check, q4tc A/B)
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11a.tar.xz || exit 9
R=$OUT; export OUT=/tmp/r; mkdir -p $OUT
SKIP_KV=1 bash bench/gpu/pending.sh new
tar -C /tmp -cJf $R/r.tar.xz r
cp $OUT/times.txt $R/
