#!/usr/bin/env bash
# tests/cli_limits.sh: the server's limits (docs/limits.md), each hit once against
# models/default with small settings, checking the status and the message that names
# the limit: --max-body (413), --max-prompt and --max-tokens (400), the request
# limits on stop, n and top_logprobs (400), --max-concurrent (503 while idle
# connections hold the places, 200 once they close), --timeout (an idle connection
# is closed), and bad flag values (exit 2). The queue limit (--queue-size, 503) and
# the context limit are tested in tests/cli_serve.sh (queue.mjs, bad.mjs); the file
# and template limits in tests/test_limits.c.
. "$(dirname "$0")/lib.sh"

if ! command -v node >/dev/null; then bad "node is needed (scripts/deps.sh installs Debian's nodejs)"; finish; fi
# post PATH BODY: status line, then the body
post() { BODY=$2 timeout 60 node tests/server/get.mjs "http://127.0.0.1:$PORT$1"; }
# expect NAME STATUS REGEX PATH BODY
expect() {
  local r; r=$(post "$4" "$5")
  if [ "$(head -1 <<<"$r")" = "$2" ] && grep -q -- "$3" <<<"$r"; then ok "$1"; else bad "$1: want $2 /$3/, got: ${r:0:300}"; fi
}

# ---- bad flag values are usage errors ----
for f in "--max-prompt 0" "--max-tokens -1" "--max-concurrent 0" "--timeout 0" "--max-body 10"; do
  out=$("$C" serve -m models/default --port 0 $f 2>&1); rc=$?
  [ "$rc" = 2 ] && grep -q "wants an integer" <<<"$out" && ok "serve $f: exit 2" || bad "serve $f ($rc): $out"
done

start srv -m models/default -np 2 -c 128 --max-body 2048 --max-prompt 16 --max-tokens 8 \
  --max-concurrent 3 --timeout 2 --no-cache-prompt || finish

# ---- request body, prompt length, max_tokens ----
pad=$(printf 'x%.0s' $(seq 1 2100))
expect "--max-body: 413" 413 'exceeds 2048 bytes (--max-body)' /v1/completions "{\"prompt\":\"a\",\"pad\":\"$pad\"}"
expect "--max-prompt: 400" 400 'the prompt has 17 tokens, over this server.s limit of 16 (--max-prompt)' \
  /v1/completions '{"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"max_tokens":1}'
expect "--max-prompt: 16 tokens pass" 200 '"completion_tokens":1' \
  /v1/completions '{"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"max_tokens":1,"temperature":0}'
expect "--max-prompt: chat" 400 '"param":"messages"' \
  /v1/chat/completions '{"messages":[{"role":"user","content":"and the LORD said unto Moses and Aaron in the land of Egypt, saying"}]}'
expect "--max-tokens: 400" 400 "'max_tokens' is 9 but this server generates at most 8 tokens per request (--max-tokens)" \
  /v1/completions '{"prompt":"In the beginning","max_tokens":9}'
expect "--max-tokens: n_predict" 400 "'n_predict' is 100" /completion '{"prompt":"In the beginning","n_predict":100}'
expect "--max-tokens: default capped" 200 '"completion_tokens":8' \
  /v1/completions '{"prompt":"In the beginning","temperature":0,"ignore_eos":true}'
expect "--max-tokens: 8 pass" 200 '"completion_tokens":8' \
  /v1/completions '{"prompt":"In the beginning","temperature":0,"ignore_eos":true,"max_tokens":8}'

# ---- per-request limits: stop strings, choices, top_logprobs ----
stops=$(printf '"s%d",' $(seq 1 17)); stops="[${stops%,}]"
expect "stop: 17 strings" 400 "'stop' takes at most 16 strings, got 17" /v1/completions "{\"prompt\":\"a\",\"stop\":$stops}"
expect "n: over the slots" 400 "'n' is 3 but this server has 2 slots" /v1/completions '{"prompt":"a","n":3}'
expect "n: over 128" 400 "'n' must be in \[1, 128\]" /v1/completions '{"prompt":"a","n":129}'
expect "top_logprobs: 21" 400 "'top_logprobs' must be in \[0, 20\]" \
  /v1/chat/completions '{"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21}'

# ---- --max-concurrent 3: three idle connections hold every place ----
# (a server of its own with a long --timeout: on a loaded machine a client may take
# longer to start than the first server's 2 s, which would close the idle connections
# before the request that should find no place)
PID1=$PID PORT1=$PORT
start srv2 -m models/default -np 1 -c 128 --max-concurrent 3 --timeout 60 --no-cache-prompt
PID2=$PID PID=$PID1
exec 5<>/dev/tcp/127.0.0.1/"$PORT" 6<>/dev/tcp/127.0.0.1/"$PORT" 7<>/dev/tcp/127.0.0.1/"$PORT"
# (on a loaded machine the server may take a moment to take the three connections in)
r=""
for _ in $(seq 1 50); do r=$(post /v1/completions '{"prompt":"a","max_tokens":1}'); [ "$(head -1 <<<"$r")" = 503 ] && break; sleep 0.1; done
[ "$(head -1 <<<"$r")" = 503 ] && grep -q 'more than 3 connections are open (--max-concurrent)' <<<"$r" && ok "--max-concurrent: 503" ||
  bad "--max-concurrent: want 503, got: ${r:0:300}"
exec 5<&- 6<&- 7<&-
r=""
for _ in $(seq 1 50); do r=$(post /v1/completions '{"prompt":"a","max_tokens":1}'); [ "$(head -1 <<<"$r")" = 200 ] && break; sleep 0.1; done
[ "$(head -1 <<<"$r")" = 200 ] && ok "--max-concurrent: 200 once they close" || bad "--max-concurrent after close: ${r:0:300}"
kill -TERM "$PID2"; wait "$PID2" 2>/dev/null; PORT=$PORT1

# ---- --timeout 2: an idle connection is closed; one that sends nothing more than a
# partial request line too ----
exec 5<>/dev/tcp/127.0.0.1/"$PORT"
printf 'POST /v1/completions HTTP/1.1\r\n' >&5
t0=$(date +%s)
timeout 10 cat <&5 >/dev/null; rc=$?
t1=$(date +%s)
exec 5<&-
[ "$rc" = 0 ] && [ $((t1 - t0)) -le 6 ] && ok "--timeout: idle connection closed after $((t1 - t0)) s" ||
  bad "--timeout: connection still open after $((t1 - t0)) s (rc $rc)"

# ---- the server is unharmed ----
expect "still answers" 200 '"choices"' /v1/completions '{"prompt":"In the beginning","max_tokens":2,"temperature":0}'
stop "$PID" && ok "clean exit" || bad "exit status $? (or no exit within 30 s): $(tail -5 "$T/srv.log")"
finish
