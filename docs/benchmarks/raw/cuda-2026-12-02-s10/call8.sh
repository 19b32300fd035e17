#!/usr/bin/env bash
# session 10, call 8: memcheck and racecheck on two T = 1 forwards of --synth gpt-oss-20b.
set -u
cd "$(dirname "$0")/.."
tar -C .gpu -xJf .gpu/c3.tar.xz || exit 9
export LD_LIBRARY_PATH=$PWD/.gpu/lib CELER_CUDA_LIB=
O=$OUT/r; mkdir -p $O /tmp/lg
echo "1000,2000" > $O/p2.txt
for tool in memcheck racecheck; do
  timeout 70 compute-sanitizer --tool $tool --print-limit 20 .gpu/new/celer logits --device cuda --synth gpt-oss-20b --tokens-file $O/p2.txt --chunk 1 -o /tmp/lg/s.st > $O/san-$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $O/san-$tool.log)"
  grep -E "Invalid|hazard|at 0x|in kernel|by thread|Address|of size" $O/san-$tool.log | head -n 16
done
