#!/usr/bin/env bash
# tests/server/bench.sh CELER MODEL_DIR TOKENIZER MAX_TOKENS [THREADS]: the server load
# benchmark of docs/benchmarks/server.md. Starts `celer serve` (NP slots, 127.0.0.1, a
# free port) and runs the load generator from a second process at each level of
# LEVELS concurrent streaming clients (a warm-up first), then prints every level's
# JSON line and one markdown table of them.
# Environment: LEVELS (default "1 4 16"), NP slots (default: the largest level, at
# least 16), WORDS prompt words (default 32), CTX context per slot (default 512),
# REQS_PER_CLIENT requests per client (default 2, at least 4 requests a level),
# LOADGEN (a built tests/server/loadgen.c; default: built here with cc, or
# LOADGEN=node to use loadgen.mjs), OUT (a file for the JSON lines).
set -eu
C=$1; M=$2; TOK=$3; N=${4:-32}; TH=${5:-0}
LEVELS=${LEVELS:-"1 4 16"}
MAXL=1; for c in $LEVELS; do [ "$c" -gt "$MAXL" ] && MAXL=$c; done
NP=${NP:-$((MAXL > 16 ? MAXL : 16))}
WORDS=${WORDS:-32}; CTX=${CTX:-512}; RPC=${REQS_PER_CLIENT:-2}
T=$(mktemp -d)
OUT=${OUT:-$T/levels.jsonl}
: >"$OUT"
LOG=$T/serve.log
"$C" serve -m "$M" --tokenizer "$TOK" --port 0 -np "$NP" -c "$CTX" -t "$TH" >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT
if [ -z "${LOADGEN:-}" ]; then
  cc -O2 -pthread "$(dirname "$0")/loadgen.c" -o "$T/loadgen"
  LOADGEN=$T/loadgen
fi
PORT=""
for _ in $(seq 1 600); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$LOG" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && grep -q ' ready ' "$LOG" && break
  sleep 0.2
done
[ -n "$PORT" ] || { echo "server did not start: $(cat "$LOG")"; exit 1; }
lg() { if [ "$LOADGEN" = node ]; then node "$(dirname "$0")/loadgen.mjs" "http://127.0.0.1:$PORT" "$@"; else "$LOADGEN" "$PORT" "$@"; fi; }
lg 1 2 "$N" "$WORDS" >/dev/null   # warm-up
for c in $LEVELS; do
  r=$((c * RPC)); [ "$r" -lt 4 ] && r=4
  lg "$c" "$r" "$N" "$WORDS" | tee -a "$OUT"
done
echo
if [ "$LOADGEN" = node ]; then cc -O2 -pthread "$(dirname "$0")/loadgen.c" -o "$T/loadgen" && "$T/loadgen" --table "$OUT"
else "$LOADGEN" --table "$OUT"; fi
