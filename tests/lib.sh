# tests/lib.sh: what every tests/cli_*.sh begins with (sourced, from the repository
# root): unset variables are errors; $C is the binary ($CELER_BIN, else build/celer);
# $T a scratch directory, removed at exit, when every process whose id is in $PIDS
# (or in $PID) is killed; the counters and their helpers (a script may redefine
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
