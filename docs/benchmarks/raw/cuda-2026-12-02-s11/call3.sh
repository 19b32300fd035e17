#!/usr/bin/env bash
# session 11, call 3: where a decode step's time goes inside its CUDA graph
# (CELER_PROFILE=2, new): llama3-8b at 1, 8 and 32 sequences, gemma3-4b at 1, beside
# the same runs unprofiled
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/s11c.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
R=$OUT; C=.gpu/new/celer
run() { # name, args...
  local n=$1; shift
  timeout 150 $C bench --device cuda "$@" -r 1 -o md > $R/$n.md 2>&1; echo "$n rc=$? $(grep -E '^\| .*(tg|pp)' $R/$n.md | awk -F'|' '{print $(NF-2), $(NF-1)}' | tr '\n' ' ')"
  CELER_PROFILE=2 timeout 150 $C bench --device cuda "$@" -r 1 -o md > $R/$n-prof.md 2>&1; echo "$n profiled rc=$?"
  grep -A40 "cuda profile" $R/$n-prof.md
}
run l8-1 --synth llama3-8b -p 0 -n 64
run l8-npl8 --synth llama3-8b -npl 8 -p 64 -n 64 -c 65536
run l8-npl32 --synth llama3-8b -npl 32 -p 64 -n 64 -c 65536
run g3-1 --synth gemma3-4b -p 0 -n 64
