# tests/lib.sh: what every tests/cli_*.sh begins with (sourced, from the repository
# root): unset variables are errors; $C is the binary ($CELER_BIN, else build/celer);
# $T a scratch directory, removed at exit, when every process whose id is in $PIDS
# (or in $PID) is killed; the counters and their helpers, and a server's start and stop (a script may redefine
# expect for its own kind of case); finish prints the line tests/run.sh adds up
# ("@@ N passed N failed") and exits 0 only when nothing failed.
set -u
C=${CELER_BIN:-build/celer}
T=$(mktemp -d)
pass=0; fail=0; PIDS=""
cleanup() { for p in $PIDS ${PID:-}; do kill "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
finish() { echo "@@ $pass passed $fail failed"; [ "$fail" = 0 ]; exit $?; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: '$2' != '$3'"; fi }
expect() { # name, wanted exit code, grep pattern for output (or ""), command...
  local name=$1 want=$2 pat=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then bad "$name (exit $rc, want $want): $out"; return; fi
  if [ -n "$pat" ] && ! grep -q -- "$pat" <<<"$out"; then bad "$name: output lacks '$pat': $out"; return; fi
  ok "$name"
}
# stop PID: SIGTERM, bounded wait (KILL and return 1 if it outlives it), its exit status
stop() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; return 1; fi
  wait "$pid"
}
# start NAME ARGS...: `$C serve --port 0 ARGS` in the background, its output in
# $T/NAME.log; sets PID (added to PIDS) and PORT and waits (bounded, 60 s) until it is
# ready (its " ready " line; with WAIT=listening only until it listens). A server that
# exits or never gets there is a failure (bad), and start returns 1.
start() {
  local name=$1; shift
  "$C" serve --port 0 "$@" >"$T/$name.log" 2>&1 &
  PID=$!; PIDS="$PIDS $PID"; PORT=""
  for _ in $(seq 1 600); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.log" | grep -o '[0-9]*$')
    if [ -n "$PORT" ] && { [ "${WAIT:-}" = listening ] || grep -q ' ready ' "$T/$name.log"; }; then return 0; fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  bad "$name: server did not start: $(cat "$T/$name.log")"; return 1
}
# need_openai: the openai npm package (pinned) for the node scripts, installed once
# into NPM_DIR (BUILD/npm, beside the binary) and exported; without node and npm, or
# when the install fails, the script fails and ends here
need_openai() {
  NPM_DIR="$(cd "$(dirname "$C")" && pwd)/npm"
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    bad "node and npm are needed (scripts/deps.sh installs Debian's nodejs and npm)"; finish
  fi
  if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ]; then
    timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund --no-save --loglevel=error openai@5.23.2 >"$T/npm.log" 2>&1 ||
      { bad "npm install openai: $(tail -5 "$T/npm.log")"; finish; }
  fi
  export NPM_DIR
}
# node_script SECONDS FILE ARGS...: a node test script's "ok"/"FAIL" lines counted here;
# an exit without a FAIL line is a failure too
node_script() {
  local limit=$1 file=$2 out rc; shift 2
  out=$(timeout "$limit" node "$file" "$@" 2>&1); rc=$?
  echo "$out"
  pass=$((pass + $(grep -c '^ok ' <<<"$out")))
  fail=$((fail + $(grep -c '^FAIL ' <<<"$out")))
  if [ "$rc" != 0 ] && ! grep -q '^FAIL ' <<<"$out"; then bad "$(basename "$file") ${1:-} exited $rc"; fi
}
