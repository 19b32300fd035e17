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

# stopped NAME PID: the server stops (lib.sh's stop) with exit status 0; under SAN=1 a
# leak makes it non-zero
stopped() {
  if stop "$2"; then ok "$1: clean exit"; else bad "$1: did not stop cleanly (status $?): $(tail -20 "$T/$1.log")"; fi
}
node_case() { node_script 300 tests/server/abuse.mjs "$@"; }

start queue -m models/default -np 1 --queue-size 4 --metrics -c 8192 && { node_case queue "$PORT"; stopped queue "$PID"; }
start burst -m models/default -np 2 --queue-size 4 --metrics -c 8192 && { node_case burst "$PORT"; stopped burst "$PID"; }
start slow -m models/default -np 1 --header-timeout 2 --min-body-rate 1000 -to 60 && { node_case slow "$PORT"; stopped slow "$PID"; }
KEY=k-$$
start key -m models/default -np 1 --api-key "$KEY" && { node_case key "$PORT" "$KEY"; stopped key "$PID"; }
# (a sanitizer build keeps freed memory in quarantine: keep that small so RSS says what is held)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8 \
  start memory -m models/default -np 1 --max-body 9000000 --requests-ram 24 && { node_case memory "$PORT" "$PID"; stopped memory "$PID"; }
start http -m models/default -np 2 --max-body 65536 && { node_case http "$PORT"; stopped http "$PID"; }

# the flags' values are checked
for f in "--header-timeout 0" "--min-body-rate 0" "--requests-ram 0"; do
  out=$("$C" serve -m models/default --port 0 $f 2>&1); rc=$?
  [ "$rc" = 2 ] && grep -q "wants an integer" <<<"$out" && ok "serve $f: exit 2" || bad "serve $f ($rc): $out"
done
finish
