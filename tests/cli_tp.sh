#!/usr/bin/env bash
# tests/cli_tp.sh: --tp N on generate, bench, run and serve (tensor parallelism; on
# the CPU the ranks are threads, docs/tensor-parallel.md): the same greedy output as
# without it, and bad values that name the flag.
. "$(dirname "$0")/lib.sh"
F=tests/fixtures/models/llama
want=$("$C" generate -m $F --tokens 1,2,3,4,5 -n 12 --device cpu 2>/dev/null)
for tp in 1 2 4; do
  check "generate --tp $tp" "$("$C" generate -m $F --tokens 1,2,3,4,5 -n 12 --device cpu --tp $tp 2>/dev/null)" "$want"
done
check "generate --tp=2" "$("$C" generate -m $F --tokens 1,2,3,4,5 -n 12 --device cpu --tp=2 2>/dev/null)" "$want"
check "CELER_TP=2" "$(CELER_TP=2 "$C" generate -m $F --tokens 1,2,3,4,5 -n 12 --device cpu 2>/dev/null)" "$want"
# run: the default model (8 heads, 4 KV heads, q4 in groups of 64) at 2 and 4 ranks
want=$("$C" run -p "In the beginning" --temp 0 -n 16 -q --device cpu </dev/null 2>/dev/null)
for tp in 2 4; do
  check "run --tp $tp" "$("$C" run -p "In the beginning" --temp 0 -n 16 -q --device cpu --tp $tp </dev/null 2>/dev/null)" "$want"
done
out=$("$C" bench -m $F -p 8 -n 4 -r 1 -t 2 --device cpu --tp 2 2>&1); rc=$?
if [ $rc = 0 ] && grep -q 'tg4' <<<"$out"; then ok "bench --tp 2"; else bad "bench --tp 2 (exit $rc): $out"; fi
# bench --synth: a named shape without a checkpoint (on the CPU the sparse file's zeros)
out=$("$C" bench --synth tiny -p 8 -n 4 -r 1 -t 2 --device cpu --tp 2 2>&1); rc=$?
if [ $rc = 0 ] && grep -q 'tg4' <<<"$out"; then ok "bench --synth tiny --tp 2"; else bad "bench --synth (exit $rc): $out"; fi
# -npl on the named shape, not the default model (the batched mode once ignored --synth)
out=$("$C" bench --synth tiny -npl 1,2 -p 8 -n 4 -r 1 -t 2 --device cpu 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '^model: llama .*BF16' <<<"$out" && ! grep -q 'Q4/G64' <<<"$out"; then ok "bench --synth tiny -npl"; else bad "bench --synth -npl (exit $rc): $out"; fi
expect "bench --synth bad" 1 "unknown shape \"nope\"" "$C" bench --synth nope -p 8 -n 4 -r 1 --device cpu
# generate --synth (the KV record's output checks on shapes without a checkpoint): on
# the CPU every weight is the sparse file's zero, so every logit is 0 and greedy takes id 0
check "generate --synth tiny" "$("$C" generate --synth tiny --tokens 5,6,7 -n 4 --device cpu 2>&1)" "0,0,0,0"
expect "generate --synth bad" 1 "unknown shape \"nope\"" "$C" generate --synth nope --tokens 1 --device cpu
expect "generate --synth -p" 2 "needs a tokenizer" "$C" generate --synth tiny -p hello --device cpu
expect "generate --synth -m" 2 "not both" "$C" generate --synth tiny -m $F --tokens 1 --device cpu
# serve: a completion at --tp 2 equals one without
comp() { BODY='{"prompt":"In the beginning","max_tokens":12,"temperature":0}' timeout 60 node tests/server/get.mjs "http://127.0.0.1:$1/v1/completions"; }
texts=""
for tp in 0 2; do
  flags=(); [ $tp != 0 ] && flags=(--tp $tp)
  "$C" serve --port 0 --device cpu "${flags[@]}" >"$T/s$tp.log" 2>&1 &
  PID=$!; PIDS="$PIDS $PID"; PORT=""
  for _ in $(seq 1 600); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/s$tp.log" | grep -o '[0-9]*$')
    if [ -n "$PORT" ] && grep -q ' ready ' "$T/s$tp.log"; then break; fi
    kill -0 "$PID" 2>/dev/null || break; sleep 0.1
  done
  texts="$texts|$(comp "$PORT" | grep -o '"text":"[^"]*"')"
  stop "$PID"
done
a=${texts#|}; a=${a%%|*}; b=${texts##*|}
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "serve --tp 2"; else bad "serve --tp 2: '$a' vs '$b'"; fi
# bad values name the flag
expect "--tp 0" 2 "flag '--tp' wants 1 or more ranks" "$C" generate -m $F --tokens 1 -n 1 --device cpu --tp 0
expect "--tp x" 2 "flag '--tp' wants a number" "$C" generate -m $F --tokens 1 -n 1 --device cpu --tp x
expect "--tp 3" 1 "\-\-tp 3: layer 0 has 4 attention heads, which 3 ranks do not divide" \
  "$C" generate -m $F --tokens 1 -n 1 --device cpu --tp 3
expect "--tp 65" 1 "\-\-tp 65 (CELER_TP): want 1..64 ranks" "$C" generate -m $F --tokens 1 -n 1 --device cpu --tp 65
expect "--tp-world" 1 "\-\-tp-world 4: the CPU ranks of one process cannot span hosts" \
  "$C" generate -m $F --tokens 1 -n 1 --device cpu --tp 2 --tp-world 4
expect "--tp-rank-offset" 1 "\-\-tp-rank-offset 3" "$C" generate -m $F --tokens 1 -n 1 --device cpu --tp 2 --tp-rank-offset 3
expect "quantization groups" 1 "\-\-tp 4: layer 0 self_attn.o_proj: .*quantization groups of 64" \
  "$C" generate -m tests/fixtures/models/llama-q4 --tokens 1 -n 1 --device cpu --tp 4
expect "--save-cache under --tp 2" 1 "not written under --tp 2" \
  "$C" generate -m $F --tokens 1,2 -n 1 --device cpu --tp 2 --save-cache "$T/c.safetensors"
finish
