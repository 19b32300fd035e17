#!/usr/bin/env bash
# tests/cli_defaults.sh: every command that takes -m (generate, logits, bench, serve,
# inspect, run, cache) runs the embedded default model (models/default) when -m is
# absent and says so in --help; with no default model anywhere (a copy of the binary
# far from models/default) each is a usage error naming -m and the fix. The status
# line while a model loads is for terminals only: nothing of it in a pipe
# (tests/test_run_pty.c sees it on a terminal).
. "$(dirname "$0")/lib.sh"
PID=""
unset CELER_DEFAULT_MODEL LLAMA_ARG_MODEL

for cmd in generate logits bench serve inspect run cache; do
  out=$("$C" $cmd --help 2>&1); rc=$?
  if [ $rc = 0 ] && grep -q -- "-m, --model DIR|ORG/NAME .*default: the embedded default model" <<<"$out" &&
     grep -q "^usage: celer $cmd \[" <<<"$out"; then ok "$cmd --help: -m optional, the default model"
  else bad "$cmd --help ($rc): $out"; fi
done

# without -m: the default model (its vocabulary is 4096 ids; its text is KJV English)
out=$("$C" generate --tokens 0,301,359 -n 3 2>"$T/err"); rc=$?
if [ $rc = 0 ] && [[ "$out" =~ ^[0-9]+,[0-9]+,[0-9]+$ ]]; then ok "generate"; else bad "generate ($rc): $out $(cat "$T/err")"; fi
if ! grep -q "loading" "$T/err"; then ok "no loading line in a pipe"; else bad "loading line in a pipe: $(cat "$T/err")"; fi
out=$("$C" logits --tokens 1,2,3 -o "$T/l.safetensors" 2>&1); rc=$?
if [ $rc = 0 ] && [ -s "$T/l.safetensors" ]; then ok "logits"; else bad "logits ($rc): $out"; fi
out=$("$C" bench -p 16 -n 4 -r 1 -t 1 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "llama 7M Q4/G64" <<<"$out"; then ok "bench"; else bad "bench ($rc): $out"; fi
out=$("$C" inspect 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "^model: .*models/default$" <<<"$out"; then ok "inspect"; else bad "inspect ($rc): $out"; fi
out=$("$C" run -p "In the beginning" --temp 0 -n 4 -q </dev/null 2>&1); rc=$?
if [ $rc = 0 ] && [ "$out" = "of the reign of" ]; then ok "run"; else bad "run ($rc): '$out'"; fi
out=$("$C" cache --tokens 1,2,3 -n 2 2>&1); rc=$?
if [ $rc = 0 ]; then ok "cache"; else bad "cache ($rc): $out"; fi

# serve: listens, loads models/default (model id "default"), stops on SIGTERM
"$C" serve --port 0 >"$T/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
  grep -q ' ready ' "$T/serve.log" && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
if grep -q "model default ready (llama, q4/g64)" "$T/serve.log"; then ok "serve"; else bad "serve: $(cat "$T/serve.log")"; fi
kill -TERM "$PID" 2>/dev/null
for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID"; bad "serve did not stop"; fi
wait "$PID" 2>/dev/null; PID=""

# no default model anywhere: a copy of the binary, run from an empty directory
mkdir -p "$T/bin" "$T/empty" && cp "$C" "$T/bin/celer"
for args in "generate --tokens 1" "logits --tokens 1 -o x" "bench" "serve --port 0" "inspect" "cache --tokens 1"; do
  out=$(cd "$T/empty" && "$T/bin/celer" $args 2>&1); rc=$?
  if [ $rc = 2 ] && grep -q "missing -m DIR, and the default model .*give -m DIR, or set CELER_DEFAULT_MODEL" <<<"$out"
  then ok "no default model: ${args%% *}"; else bad "no default model: $args ($rc): $out"; fi
done
out=$(cd "$T/empty" && "$T/bin/celer" run -p hi 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "default model .*was not found.*CELER_DEFAULT_MODEL" <<<"$out"; then ok "no default model: run"
else bad "no default model: run ($rc): $out"; fi
finish
