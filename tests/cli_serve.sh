#!/usr/bin/env bash
# tests/cli_serve.sh: `celer serve` end to end. Servers bind 127.0.0.1 on a port the
# kernel picks (--port 0, read back from the log); clients are node scripts in
# tests/server/ using the openai npm package (installed here into BUILD/npm) and raw
# sockets. Every wait is bounded. Cases: flags and LLAMA_ARG_* variables, the openai
# client against models/default (chat, completions, streaming, logprobs, n, stop, 16
# concurrent greedy streams = alone), bad input, a full queue, the second-turn prompt
# cache on the gemma3 and gpt_oss fixtures, a disconnect mid-stream, /metrics KV bytes
# equal to celer inspect's (gemma4_moe, llama), SIGTERM draining.
. "$(dirname "$0")/lib.sh"
B=$(dirname "$C")

# get URL [KEY]: status line, then the body
get() { timeout 60 node tests/server/get.mjs "$@"; }
# node SCRIPT ARGS...: runs a test script (bounded), counts its ok/FAIL lines
node_case() { node_script 300 "tests/server/$1" "${@:2}"; }

# ---- flags ----
out=$("$C" serve --help 2>&1)
if grep -q 'usage: celer serve' <<<"$out" && grep -q -- '--api-key' <<<"$out" && grep -q -- '-np, --parallel' <<<"$out"; then ok "serve --help"; else bad "serve --help: $out"; fi
out=$("$C" serve --frobnicate 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q "unknown flag '--frobnicate'" <<<"$out" && ok "serve unknown flag" || bad "serve unknown flag ($rc): $out"
# without -m serve takes the default model (tests/cli_defaults.sh); with no default model
# either (a copy of the binary far from models/default) it is a usage error
mkdir -p "$T/bin" && cp "$C" "$T/bin/celer"
out=$(cd "$T" && env -u CELER_DEFAULT_MODEL -u LLAMA_ARG_MODEL "$T/bin/celer" serve --port 0 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q "missing -m DIR, and the default model" <<<"$out" && ok "serve missing -m" || bad "serve missing -m ($rc): $out"
out=$("$C" serve -m "$T/none" --port 0 2>&1); rc=$?
[ "$rc" = 1 ] && grep -q "error" <<<"$out" && ok "serve missing model: exit 1" || bad "serve missing model ($rc): $out"

# ---- the npm client ----
need_openai

# ---- /health says 503 while the model loads (the tokenizer comes through a FIFO), then 200 ----
mkdir -p "$T/slow" && mkfifo "$T/slow/tokenizer.json"
if WAIT=listening start loading -m tests/fixtures/models/llama --tokenizer "$T/slow/tokenizer.json"; then
  h=$(get "http://127.0.0.1:$PORT/health")
  c=$(BODY='{"prompt":"x"}' get "http://127.0.0.1:$PORT/v1/completions")
  [ "$(head -1 <<<"$h")" = 503 ] && grep -q 'Loading model' <<<"$h" && [ "$(head -1 <<<"$c")" = 503 ] &&
    ok "loading: /health and requests 503" || bad "loading: $h / $c"
  timeout 20 cp tests/server/tok512/tokenizer.json "$T/slow/tokenizer.json"
  for _ in $(seq 1 300); do h=$(get "http://127.0.0.1:$PORT/health"); [ "$(head -1 <<<"$h")" = 200 ] && break; sleep 0.1; done
  [ "$(head -1 <<<"$h")" = 200 ] && grep -q '"ok"' <<<"$h" && ok "loaded: /health 200" || bad "loaded: $h"
  stop "$PID" || bad "loading server exit"
fi

# ---- models/default: the openai client, bad input; LLAMA_ARG_* variables ----
KEY=sekrit-$$
if LLAMA_ARG_N_PARALLEL=16 LLAMA_ARG_ENDPOINT_METRICS=1 start main -m models/default --api-key "$KEY" -c 256 --max-body 65536 --strict-model; then
  MAIN=$PID
  slots=$(get "http://127.0.0.1:$PORT/metrics" "$KEY" | grep '^celer_slots_total ' | cut -d' ' -f2)
  [ "$slots" = 16 ] && ok "LLAMA_ARG_N_PARALLEL, LLAMA_ARG_ENDPOINT_METRICS" || bad "LLAMA_ARG_* variables: slots '$slots'"
  p=$(get "http://127.0.0.1:$PORT/props" "$KEY")
  grep -q '"total_slots":16' <<<"$p" && grep -q '"n_ctx":256' <<<"$p" && grep -q '"model_alias":"default"' <<<"$p" &&
    ok "/props" || bad "/props: $p"
  node_case e2e.mjs "$PORT" "$KEY"
  node_case bad.mjs "$PORT" "$KEY"
  # a port in use is an error naming it: two servers never share a port (no SO_REUSEPORT,
  # which let a second server listen and split requests between two models)
  out=$(timeout 30 "$C" serve -m models/default --port "$PORT" 2>&1); rc=$?
  [ "$rc" = 1 ] && grep -q "cannot listen on 127.0.0.1:$PORT" <<<"$out" && ok "port in use: error" ||
    bad "port in use (exit $rc): $out"
  m=$(get "http://127.0.0.1:$PORT/metrics" "$KEY")
  for k in celer_requests_total celer_prompt_tokens_total celer_completion_tokens_total celer_prompt_cache_hits_total \
           celer_prompt_cache_reused_tokens_total celer_kv_bytes_in_use celer_queue_depth \
           celer_time_to_first_token_seconds_bucket celer_time_per_output_token_seconds_bucket; do
    grep -q "^$k" <<<"$m" || { bad "metrics lack $k"; continue; }
  done
  for pair in llamacpp:prompt_tokens_total=celer_prompt_tokens_total llamacpp:tokens_predicted_total=celer_completion_tokens_total \
              llamacpp:requests_processing=celer_slots_busy llamacpp:requests_deferred=celer_queue_depth \
              llamacpp:kv_cache_tokens=celer_kv_tokens_in_use; do
    a=$(grep "^${pair%%=*} " <<<"$m" | cut -d' ' -f2); c=$(grep "^${pair#*=} " <<<"$m" | cut -d' ' -f2)
    [ -n "$a" ] && [ "$a" = "$c" ] && ok "metrics alias ${pair%%=*}" || bad "metrics alias ${pair%%=*}: '$a' vs '$c'"
  done
  hits=$(grep '^celer_prompt_cache_hits_total ' <<<"$m" | cut -d' ' -f2)
  [ "${hits:-0}" -gt 0 ] 2>/dev/null && ok "metrics: counters and histograms" || bad "metrics: $m"
  stop "$MAIN" && ok "SIGTERM: clean exit" || bad "SIGTERM: exit $?: $(tail -3 "$T/main.log")"
fi

# ---- --cors-origin: preflight and headers; a control character in it is a usage error ----
if start cors -m models/default -np 2 --cors-origin http://localhost:3000 --api-key "$KEY"; then
  node_case cors.mjs "$PORT" "$KEY" http://localhost:3000
  stop "$PID" || bad "cors server exit"
fi
out=$("$C" serve --cors-origin "$(printf 'a\r\nX-Evil: 1')" 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- '--cors-origin' <<<"$out" && ok "--cors-origin: control characters refused" ||
  bad "--cors-origin with CR LF (exit $rc): $out"

# ---- a full queue answers 503 ----
if start queue -m models/default -np 1 --queue-size 1 -a kjv; then
  node_case model_name.mjs "$PORT" kjv
  node_case cors.mjs "$PORT" "" -
  node_case queue.mjs "$PORT"
  stop "$PID" || bad "queue server exit"
fi

# ---- second turn on sliding-window fixtures; a disconnect mid-stream ----
for fx in gemma3 gpt_oss; do
  if start "$fx" -m "tests/fixtures/models/$fx" --tokenizer tests/server/tok512 -np 2 --metrics; then
    echo "# $fx"
    node_case cache.mjs "$PORT"
    stop "$PID" || bad "$fx server exit"
  fi
done

# ---- /metrics KV bytes = celer inspect's figure (shared and sliding layers; dense) ----
for fx in gemma4_moe llama; do
  if start "kv-$fx" -m "tests/fixtures/models/$fx" --tokenizer tests/server/tok512 -np 1 --metrics; then
    echo "# kv $fx"
    node_case kv.mjs "$PORT" "$C" "tests/fixtures/models/$fx"
    stop "$PID" || bad "kv-$fx server exit"
  fi
done

# ---- SIGTERM while a stream is running: it finishes, then the process exits 0 ----
if start drain -m models/default -np 2; then
  node_case drain.mjs "$PORT" "$PID"
  stop "$PID" && ok "drain: exit 0" || bad "drain: exit status $?"
  grep -q 'finishing in-flight requests' "$T/drain.log" && grep -q 'stopped' "$T/drain.log" && ok "drain: logged" || bad "drain log: $(cat "$T/drain.log")"
fi
finish
