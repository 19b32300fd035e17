#!/usr/bin/env bash
# tp22's device run: the NCCL path at one rank on one H200 (run from the repo root)
export LD_LIBRARY_PATH=.gpu/lib
B=.gpu/build
nvidia-smi -L
echo "== generate --tp 2 on one GPU (must name --tp)"
$B/celer generate -m tests/fixtures/models/llama --tokens 1,2,3 -n 4 --device cuda --tp 2; echo "rc=$?"
echo "== generate: no --tp vs --tp 1 (NCCL one-rank)"
$B/celer generate -m tests/fixtures/models/llama --tokens 1,2,3,4,5 -n 16 --device cuda --precision exact
$B/celer generate -m tests/fixtures/models/llama --tokens 1,2,3,4,5 -n 16 --device cuda --precision exact --tp 1; echo "rc=$?"
echo "== test_tp 1 (CELER_DEVICE=cuda: every fixture at --tp 1 through NCCL, tolerance 5e-2)"
CELER_DEVICE=cuda timeout 50 $B/tests/test_tp 1 > "$OUT/test_tp_cuda.log" 2>&1; echo "rc=$?"
grep -E "^FAIL|^@@|test_tp.c" "$OUT/test_tp_cuda.log" | head -40
echo "== bench --synth llama3-8b: no --tp, then --tp 1"
timeout 25 $B/celer bench --synth llama3-8b -p 512 -n 128 -r 1 > "$OUT/bench_synth_8b_notp.log" 2>&1; echo "rc=$?"
timeout 25 $B/celer bench --synth llama3-8b --tp 1 -p 512 -n 128 -r 1 > "$OUT/bench_synth_8b_tp1.log" 2>&1; echo "rc=$?"
cat "$OUT/bench_synth_8b_notp.log" "$OUT/bench_synth_8b_tp1.log"
