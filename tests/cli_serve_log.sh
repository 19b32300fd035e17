#!/usr/bin/env bash
# tests/cli_serve_log.sh: what `celer serve` says about its requests: the request log on
# stderr (text, --log-format json, -v, --quiet), llama-server's `timings`, response ids
# and /slots (--slots). Servers run on 127.0.0.1 with models/default; their stderr goes to
# a file that tests/server/reqlog.mjs reads. Every wait is bounded.
. "$(dirname "$0")/lib.sh"

# start NAME ARGS...: starts a server with its stderr in $T/NAME.log, sets PORT and PID and
# waits (bounded) until it is ready: its "ready" line, or with QUIET_PORT (--quiet prints
# nothing) until /health on that port answers 200
start() {
  local name=$1; shift
  "$C" serve "$@" 2>"$T/$name.log" >/dev/null &
  PID=$!; PIDS="$PIDS $PID"; PORT=${QUIET_PORT:-}
  for _ in $(seq 1 600); do
    if [ -n "${QUIET_PORT:-}" ]; then
      [ "$(timeout 10 node tests/server/get.mjs "http://127.0.0.1:$PORT/health" | head -1)" = 200 ] && return 0
    else
      PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.log" | grep -o '[0-9]*$')
      [ -n "$PORT" ] && grep -q ' ready ' "$T/$name.log" && return 0
    fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  bad "$name: server did not start: $(cat "$T/$name.log")"; return 1
}
node_case() { node_script 400 tests/server/reqlog.mjs "$@"; }

if ! command -v node >/dev/null; then bad "node is needed (scripts/deps.sh installs Debian's nodejs)"; finish; fi

# ---- flags ----
out=$("$C" serve --help 2>&1)
for f in '--log-format FMT' '-v, --verbose' '--quiet' '--slots'; do
  grep -q -- "$f" <<<"$out" && ok "serve --help lists $f" || bad "serve --help lacks $f: $out"
done
out=$("$C" serve --log-format xml --port 0 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- "--log-format: 'xml' is not a log format: use text or json" <<<"$out" && ok "--log-format xml: exit 2 naming the flag and the formats" ||
  bad "--log-format xml (exit $rc): $out"
out=$("$C" serve --quiet -v --port 0 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q -- "--quiet and --verbose" <<<"$out" && ok "--quiet -v: exit 2" || bad "--quiet -v (exit $rc): $out"

# ---- docs/server.md names every flag and every endpoint ----
missing=""
for f in $("$C" serve --help 2>&1 | grep -o '^  \(-[a-z]*, \)\?--[a-z-]*' | grep -o -- '--[a-z-]*$'); do
  [ "$f" = --help ] && continue
  grep -q -- "\(\`\|, \)$f[\` ]" docs/server.md || missing="$missing $f"
done
[ -z "$missing" ] && ok "docs/server.md: every flag of serve --help" || bad "docs/server.md lacks the flags:$missing"
missing=""
for p in $(grep -o '^    {"/[^"]*", \("/[^"]*"\|NULL\)' src/server/endpoints.c | grep -o '"/[^"]*"' | tr -d '"'); do
  grep -q -- "\`\(GET \|POST \)\?$p\`" docs/server.md || missing="$missing $p"
done
[ -z "$missing" ] && ok "docs/server.md: every endpoint and alias" || bad "docs/server.md lacks the endpoints:$missing"

KEY=log-key-$$
# ---- text log, timings, ids, /slots ----
if start text -m models/default -c 1024 -np 2 --port 0 --slots --api-key "$KEY" --metrics; then
  node_case text "$PORT" "$T/text.log" "$KEY"
  # every metric name /metrics exports is documented
  missing=""
  for m in $(timeout 10 node tests/server/get.mjs "http://127.0.0.1:$PORT/metrics" "$KEY" | grep -o '^[a-z][a-z_:]*' | sed 's/_\(bucket\|sum\|count\)$//' | sort -u); do
    grep -q -- "\`$m[\`{]" docs/server.md || missing="$missing $m"
  done
  [ -z "$missing" ] && ok "docs/server.md: every metric name" || bad "docs/server.md lacks the metrics:$missing"
  stop "$PID" && ok "text server: clean exit" || bad "text server exit: $(tail -3 "$T/text.log")"
  grep -q '^celer serve: stopped$' "$T/text.log" && ok "text: the shutdown lines" || bad "text: no 'stopped' line: $(tail -3 "$T/text.log")"
fi
# ---- --log-format json -v ----
if LLAMA_ARG_ENDPOINT_SLOTS=1 start json -m models/default -c 1024 -np 2 --port 0 --log-format json -v --api-key "$KEY"; then
  node_case json "$PORT" "$T/json.log" "$KEY"
  r=$(timeout 10 node tests/server/get.mjs "http://127.0.0.1:$PORT/slots" "$KEY" | head -1)
  [ "$r" = 200 ] && ok "LLAMA_ARG_ENDPOINT_SLOTS=1: /slots" || bad "LLAMA_ARG_ENDPOINT_SLOTS: /slots $r"
  stop "$PID" || bad "json server exit"
  last=$(tail -1 "$T/json.log")
  [[ "$last" =~ ^\{\"time\":\"[0-9T:.-]+Z\",\"level\":\"info\",\"message\":\"stopped\"\}$ ]] && ok "json: the shutdown line" || bad "json: last line '$last'"
fi
# ---- -v text ----
if start vtext -m models/default -c 1024 -np 2 --port 0 -v; then
  node_case vtext "$PORT" "$T/vtext.log"
  node_case noslots "$PORT" "$T/vtext.log"
  stop "$PID" || bad "vtext server exit"
fi
# ---- --quiet: errors only ----
QP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if QUIET_PORT=$QP start quiet -m models/default -c 1024 -np 1 --quiet --port "$QP" --header-timeout 1; then
  node_case quiet "$PORT" "$T/quiet.log"
  stop "$PID" || bad "quiet server exit"
  # the 503s of start's readiness probes while the model loaded are failed requests
  # too (a slow build meets some); past those, the case's 2 lines and nothing else
  n=$(grep -cv ' GET /health 503 .*Loading model' "$T/quiet.log")
  [ "$n" = 2 ] && ok "--quiet: no startup or shutdown lines" || bad "--quiet: $n lines: $(cat "$T/quiet.log")"
fi
finish
