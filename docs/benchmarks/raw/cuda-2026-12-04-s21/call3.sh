#!/usr/bin/env bash
# session 21, call 3: the lean flash-decoding kernel (CUK_FLASH_DECODE=1: 4 warps share
# one 16-row tile) against the 64-row flash tile for one-query attention past 256 keys,
# end to end, alone (the sixteenth session's A/B had it on together with decode
# staging): the GPU tests with it on, then tg128 at depths 0, 1,024 and 4,096 on
# llama3-8b bf16 (3 rounds at 4,096), its q4, gemma3-4b and qwen3-0.6b, alternated.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s21c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=/tmp/r; mkdir -p $O; N=.gpu/new
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 100 $N/tests/cuda/test_cuda_kernels > $O/kernels.log 2>&1; el "kernels rc=$? $(tail -n 1 $O/kernels.log)"
for t in test_cuda_graph test_cuda_decode test_cuda_batch; do
  CUK_FLASH_DECODE=1 timeout 300 $N/tests/cuda/$t > "$O/$t-fd1.log" 2>&1; el "$t fd1 rc=$? $(tail -n 1 $O/$t-fd1.log)"
done
CUK_FLASH_DECODE=1 timeout 200 env CELER_DEVICE=cuda $N/tests/test_fixtures_models > $O/fixtures-fd1.log 2>&1; el "fixtures fd1 rc=$? $(tail -n 1 $O/fixtures-fd1.log)"
b() { # label, env, args
  local l=$1 e=$2; shift 2
  env $e timeout 120 $N/celer bench --device cuda "$@" -o md >> $O/$l.md 2>&1
  el "$l [$e] rc=$? $(grep -E '^\| *[a-z0-9]' $O/$l.md | tail -n 1 | awk -F'|' '{printf "%s ", $(NF-1)}')"
}
timeout 150 $N/celer synth --shape llama3-8b --q4 -o /tmp/l8q4 > $O/synth.log 2>&1; el "synth rc=$?"
for round in 1 2 3; do
  for f in 0 1; do b l8-d4096-fd$f CUK_FLASH_DECODE=$f --synth llama3-8b -p 0 -n 128 -r 3 -d 4096; done
done
for f in 0 1; do b l8-d1024-fd$f CUK_FLASH_DECODE=$f --synth llama3-8b -p 0 -n 128 -r 3 -d 1024; done
for f in 0 1; do b l8-d0-fd$f CUK_FLASH_DECODE=$f --synth llama3-8b -p 0 -n 128 -r 3; done
for f in 0 1; do b l8q4-d4096-fd$f CUK_FLASH_DECODE=$f -m /tmp/l8q4 -p 0 -n 128 -r 3 -d 4096; done
for f in 0 1; do b g3-d4096-fd$f CUK_FLASH_DECODE=$f --synth gemma3-4b -p 0 -n 128 -r 3 -d 4096; done
for f in 0 1; do b q06-d4096-fd$f CUK_FLASH_DECODE=$f --synth qwen3-0.6b -p 0 -n 128 -r 3 -d 4096; done
for f in 0 1; do b l8-npl-d-fd$f CUK_FLASH_DECODE=$f --synth llama3-8b -npl 1,8 -p 2048 -n 64 -c 40000 -r 1; done
tar -C /tmp -cJf $OUT/r.tar.xz r
