#!/usr/bin/env bash
# session 14, call 4: after the review (one reference helper for both attention tests), the reverted tree's kernel tests, and the batched-attention test
# with a deliberate fault (the last row's query position one past: windowed cases must fail)
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s14d.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
N=.gpu/new
timeout 200 $N/tests/cuda/test_cuda_kernels > /tmp/k.log 2>&1; echo "kernels rc=$? $(tail -n 1 /tmp/k.log)"; grep -E "FAIL" /tmp/k.log | head -5
timeout 200 $N/tests/cuda/test_cuda_kernels_broken > /tmp/kb.log 2>&1; echo "broken rc=$? $(tail -n 1 /tmp/kb.log)"; grep -E "FAIL|batched" /tmp/kb.log | head -8
