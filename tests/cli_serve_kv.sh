#!/bin/bash
# tests/cli_serve_kv.sh: the server on the KV block pool (docs/kv-cache.md): blocks
# return to the pool after a request and a disconnect; with --kv-budget for one
# sequence, concurrent requests wait in the queue and are all served, a request that
# outgrows the budget fails clearly; bad --kv-budget values are refused.
. "$(dirname "$0")/lib.sh"

start() { # NAME ARGS...: a server on a free port, PORT and PID set, ready (bounded)
  local name=$1; shift
  "$C" serve --port 0 "$@" >"$T/$name.log" 2>&1 &
  PID=$!; PIDS="$PIDS $PID"; PORT=""
  for _ in $(seq 1 600); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.log" | grep -o '[0-9]*$')
    if [ -n "$PORT" ] && grep -q ' ready ' "$T/$name.log"; then return 0; fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  bad "$name: server did not start: $(cat "$T/$name.log")"; return 1
}
M=(-m tests/fixtures/models/llama --tokenizer tests/server/tok512 -np 4 -b 16 --no-cache-prompt --metrics)

for mode in free budget; do
  extra=(); [ "$mode" = budget ] && extra=(--kv-budget 1000000)
  if start "$mode" "${M[@]}" "${extra[@]}"; then
    echo "# $mode"
    node_script 300 tests/server/kvpool.mjs "$PORT" "$mode"
    stop "$PID" && ok "$mode: exit 0" || bad "$mode: server exit"
  fi
done

for v in 0 -1 1.5 abc 12Q 0.0 1e400; do
  expect "--kv-budget $v refused" 2 "--kv-budget" "$C" serve --kv-budget "$v" -m tests/fixtures/models/llama
done
finish
