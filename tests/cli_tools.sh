#!/usr/bin/env bash
# tests/cli_tools.sh: tool calls end to end (docs/tool-calls.md): `celer serve` (port
# from the kernel, every wait bounded) and tests/server/tools.mjs, the openai npm client
# asking for calls (tool_choice named, required, auto, streamed) and checking them
# against the tools' schemas: on models/default (hermes syntax), then on the gpt_oss
# fixture with a harmony tokenizer (tests/server/harmony_tok.mjs: special-token markers);
# then each server's clean exit.
. "$(dirname "$0")/lib.sh"
PID=""
B=$(dirname "$C")

NPM_DIR="$(cd "$B" && pwd)/npm"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  bad "node and npm are needed (scripts/deps.sh installs Debian's nodejs and npm)"; finish
fi
if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ]; then
  timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund --no-save --loglevel=error openai@5.23.2 >"$T/npm.log" 2>&1 ||
    { bad "npm install openai: $(tail -5 "$T/npm.log")"; finish; }
fi
export NPM_DIR

# run NAME MODE SERVE-ARGS...: a server, tools.mjs in MODE against it, its clean exit
run() {
  local name=$1 mode=$2; shift 2
  "$C" serve --port 0 -c 1024 -np 2 "$@" >"$T/$name.log" 2>&1 &
  PID=$!; PORT=""
  for _ in $(seq 1 600); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/$name.log" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && grep -q ' ready ' "$T/$name.log" && break
    kill -0 "$PID" 2>/dev/null || break
    PORT=""; sleep 0.1
  done
  [ -n "$PORT" ] || { bad "$name: server did not start: $(cat "$T/$name.log")"; return; }
  echo "# $name"
  local out rc
  out=$(timeout 500 node tests/server/tools.mjs "$PORT" "$mode" 2>&1); rc=$?
  echo "$out"
  pass=$((pass + $(grep -c '^ok ' <<<"$out")))
  fail=$((fail + $(grep -c '^FAIL ' <<<"$out")))
  if [ "$rc" != 0 ] && ! grep -q '^FAIL ' <<<"$out"; then bad "$name: tools.mjs exited $rc"; fi
  kill -TERM "$PID"
  for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID"; bad "$name: server exit after SIGTERM"; else
    wait "$PID"; rc=$?; [ "$rc" = 0 ] && ok "$name: server exit 0" || bad "$name: server exit $rc: $(tail -5 "$T/$name.log")"
  fi
  PID=""
}

run default hermes -m models/default
node tests/server/harmony_tok.mjs "$T/harmony" || bad "harmony tokenizer"
run gpt_oss harmony -m tests/fixtures/models/gpt_oss --tokenizer "$T/harmony"
finish
