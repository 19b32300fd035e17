#!/usr/bin/env bash
# session 11, call 6: the host's part of batched steps (CELER_STATS=1): llama3-8b at
# 8, 32 and 128 sequences and qwen3-0.6b at 128, each with and without the profile
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11e.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; C=.gpu/new/celer
for a in "l8|llama3-8b|8" "l8|llama3-8b|32" "l8|llama3-8b|128" "q06|qwen3-0.6b|128"; do
  IFS='|' read -r n s b <<< "$a"
  CELER_STATS=1 timeout 120 $C bench --device cuda --synth $s -npl $b -p 64 -n 128 -c 65536 -r 1 -o md > $R/stats-$n-$b.md 2>&1
  echo "== $s B=$b rc=$?"; grep -E "^\| +[0-9]|cuda:|forwards|host|enqueue|wait" $R/stats-$n-$b.md | head -12
done
