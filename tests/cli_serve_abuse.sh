#!/usr/bin/env bash
# tests/cli_serve_abuse.sh: `celer serve` against clients that misbehave (issue #23),
# each case on its own server (127.0.0.1, --port 0, models/default) driven by
# tests/server/abuse.mjs over raw sockets; every wait is bounded. Cases: queued
# clients that disconnect, a burst against -np 2 --queue-size 4, slowloris headers
# and trickled bodies, the API key checked before the body, request memory budgets
# and --requests-ram, and HTTP details (half-closed clients, conflicting
# Content-Length, unsupported Transfer-Encoding, an endless chunked body, ids and
# max_tokens out of range). Under SAN=1 the server's exit status carries any leak.
. "$(dirname "$0")/lib.sh"
if ! command -v node >/dev/null; then bad "node is needed (scripts/deps.sh installs Debian's nodejs)"; finish; fi

start() {
  local name=$1; shift
  "$C" serve -m models/default --port 0 "$@" >"$T/$name.log" 2>&1 &
  PID=$!; PIDS="$PIDS $PID"; PORT=""
  for _ in $(seq 1 600); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.log" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && grep -q ' ready ' "$T/$name.log" && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  bad "$name: server did not start: $(cat "$T/$name.log")"; return 1
}
stop() {
  local name=$1 pid=$2
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; bad "$name: server did not stop"; return; fi
  wait "$pid" && ok "$name: clean exit" || bad "$name: exit status $?: $(tail -20 "$T/$name.log")"
}
node_case() { node_script 300 tests/server/abuse.mjs "$@"; }

start queue -np 1 --queue-size 4 --metrics -c 1024 && { node_case queue "$PORT"; stop queue "$PID"; }
start burst -np 2 --queue-size 4 --metrics -c 1024 && { node_case burst "$PORT"; stop burst "$PID"; }
start slow -np 1 --header-timeout 2 --min-body-rate 1000 -to 60 && { node_case slow "$PORT"; stop slow "$PID"; }
KEY=k-$$
start key -np 1 --api-key "$KEY" && { node_case key "$PORT" "$KEY"; stop key "$PID"; }
# (a sanitizer build keeps freed memory in quarantine: keep that small so RSS says what is held)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8 \
  start memory -np 1 --max-body 9000000 --requests-ram 24 && { node_case memory "$PORT" "$PID"; stop memory "$PID"; }
start http -np 2 --max-body 65536 && { node_case http "$PORT"; stop http "$PID"; }

# the flags' values are checked
for f in "--header-timeout 0" "--min-body-rate 0" "--requests-ram 0"; do
  out=$("$C" serve -m models/default --port 0 $f 2>&1); rc=$?
  [ "$rc" = 2 ] && grep -q "wants an integer" <<<"$out" && ok "serve $f: exit 2" || bad "serve $f ($rc): $out"
done
finish
