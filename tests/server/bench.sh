#!/usr/bin/env bash
# tests/server/bench.sh CELER MODEL_DIR TOKENIZER MAX_TOKENS [THREADS]: the server benchmark of
# docs/benchmarks/server.md. Starts `celer serve` (16 slots, 127.0.0.1, a free port)
# and runs tests/server/loadgen.mjs (or $LOADGEN, loadgen.c built) from a second process at 1, 4 and 16 concurrent
# streams; prints one JSON line per level.
set -eu
C=$1; M=$2; TOK=$3; N=${4:-32}; TH=${5:-0}
LOG=$(mktemp)
"$C" serve -m "$M" --tokenizer "$TOK" --port 0 -np 16 -c 512 -t "$TH" >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$LOG"' EXIT
PORT=""
for _ in $(seq 1 600); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$LOG" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && grep -q ' ready ' "$LOG" && break
  sleep 0.2
done
[ -n "$PORT" ] || { echo "server did not start: $(cat "$LOG")"; exit 1; }
# LOADGEN=path/to/loadgen (tests/server/loadgen.c built) where node is missing
lg() { if [ -n "${LOADGEN:-}" ]; then "$LOADGEN" "$PORT" "$@"; else node "$(dirname "$0")/loadgen.mjs" "http://127.0.0.1:$PORT" "$@"; fi; }
lg 1 2 "$N" >/dev/null   # warm-up
for c in 1 4 16; do
  lg "$c" $((c < 4 ? 4 : c * 2)) "$N"
done
