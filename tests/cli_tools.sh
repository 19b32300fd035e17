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

need_openai

# run NAME MODE SERVE-ARGS...: a server, tools.mjs in MODE against it, its clean exit
run() {
  local name=$1 mode=$2; shift 2
  start "$name" -c 1024 -np 2 "$@" || return
  echo "# $name"
  node_script 500 tests/server/tools.mjs "$PORT" "$mode"
  stop "$PID" && ok "$name: server exit 0" || bad "$name: server exit $?: $(tail -5 "$T/$name.log")"
}

run default hermes -m models/default
node tests/server/harmony_tok.mjs "$T/harmony" || bad "harmony tokenizer"
run gpt_oss harmony -m tests/fixtures/models/gpt_oss --tokenizer "$T/harmony"
finish
