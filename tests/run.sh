#!/usr/bin/env bash
# tests/run.sh BUILD_DIR: runs every test binary and every tests/cli_*.sh script,
# adds up their cases, and ends with the line "N passed, N failed".
set -u
B=${1:-build}
cd "$(dirname "$0")/.."
export CELER_BIN="$B/celer"
# the CPU suite (its tolerances are the CPU's); `make test-cuda` runs the GPU's
export CELER_DEVICE=cpu
pass=0; fail=0
run_one() {
  local name=$1; shift
  local log; log=$(mktemp)
  echo "== $name"
  "$@" >"$log" 2>&1; local rc=$?
  cat "$log"
  local line; line=$(grep '^@@ ' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    set -- $line
    pass=$((pass + $2)); fail=$((fail + $4))
    if [ "$rc" != 0 ] && [ "$4" = 0 ]; then echo "FAIL $name: exit $rc"; fail=$((fail + 1)); fi
  else
    echo "FAIL $name: exited $rc without a summary (crash?)"; fail=$((fail + 1))
  fi
  rm -f "$log"
}
for t in "$B"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "$(basename "$t")" "$t"
done
for s in tests/cli_*.sh; do
  [ -f "$s" ] || continue
  run_one "$(basename "$s")" bash "$s"
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
