#!/usr/bin/env bash
# tests/cli_grammar.sh: constrained decoding from the outside (docs/grammar.md):
# `celer generate --grammar / --json-schema` (and `celer run --grammar`) with models/default (the output must
# match: checked by node's JSON.parse and the schema's constraints, never by celer),
# their errors, and tests/server/grammar.mjs (the openai npm client) against
# `celer serve`. Every wait is bounded.
. "$(dirname "$0")/lib.sh"
B=$(dirname "$C")

# ---- celer generate ----
printf 'root ::= "Verse " [1-9] [0-9]? ": " ("light" | "darkness") "."\n' >"$T/v.gbnf"
out=$(timeout 120 "$C" generate -p "In the beginning" -n 40 --grammar "$T/v.gbnf" 2>&1); rc=$?
[ "$rc" = 0 ] && grep -Eqx 'Verse [1-9][0-9]?: (light|darkness)\.' <<<"$out" && ok "generate --grammar" || bad "generate --grammar ($rc): $out"

cat >"$T/s.json" <<'JSON'
{"type":"object","properties":{"name":{"type":"string","maxLength":10},"n":{"type":"integer"},
 "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},"required":["name","n","tags"],"additionalProperties":false}
JSON
out=$(timeout 300 "$C" generate -p "In the beginning" -n 1500 --temp 0.9 --seed 4 --json-schema "$T/s.json" 2>&1); rc=$?
res=$(printf '%s' "$out" | timeout 30 node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  let v; try { v = JSON.parse(s); } catch (e) { console.log("not JSON: " + e.message); return; }
  const ok = v && typeof v === "object" && Object.keys(v).sort().join() === "n,name,tags" && typeof v.name === "string" &&
    [...v.name].length <= 10 && Number.isInteger(v.n) && Array.isArray(v.tags) && v.tags.length <= 2 &&
    v.tags.every((t) => t === "a" || t === "b");
  console.log(ok ? "valid" : "invalid: " + JSON.stringify(v));
});')
[ "$rc" = 0 ] && [ "$res" = valid ] && ok "generate --json-schema: valid JSON" || bad "generate --json-schema ($rc): $res: $out"

out=$(timeout 120 "$C" run -q -p "In the beginning" -n 40 --temp 0 --grammar "$T/v.gbnf" 2>&1); rc=$?
[ "$rc" = 0 ] && grep -Eqx 'Verse [1-9][0-9]?: (light|darkness)\.' <<<"$out" && ok "run --grammar" || bad "run --grammar ($rc): $out"

printf 'root ::= "a" | b\n' >"$T/bad.gbnf"
out=$("$C" generate -p "x" --grammar "$T/bad.gbnf" 2>&1); rc=$?
[ "$rc" = 1 ] && grep -q 'bad.gbnf: grammar: line 1, column 16: undefined rule "b"' <<<"$out" && ok "generate: bad grammar named" || bad "bad grammar ($rc): $out"
printf '{"type":"object","properties":{"a":{"type":"number","multipleOf":3}}}' >"$T/bad.json"
out=$("$C" generate -p "x" --json-schema "$T/bad.json" 2>&1); rc=$?
[ "$rc" = 1 ] && grep -q 'json schema: /properties/a: unsupported keyword "multipleOf"' <<<"$out" && ok "generate: unsupported keyword named" || bad "bad schema ($rc): $out"
out=$("$C" generate -p "x" --json-schema "$T/s.json" --grammar "$T/v.gbnf" 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q 'one of --grammar and --json-schema' <<<"$out" && ok "generate: both flags refused" || bad "both flags ($rc): $out"

# ---- celer serve ----
NPM_DIR="$(cd "$B" && pwd)/npm"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  bad "node and npm are needed (scripts/deps.sh installs Debian's nodejs and npm)"; finish
fi
if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ]; then
  timeout 300 npm install --prefix "$NPM_DIR" --no-audit --no-fund --no-save --loglevel=error openai@5.23.2 >"$T/npm.log" 2>&1 ||
    { bad "npm install openai: $(tail -5 "$T/npm.log")"; finish; }
fi
export NPM_DIR
"$C" serve --port 0 -m models/default -np 3 -c 2048 >"$T/serve.log" 2>&1 &
PID=$!; PIDS="$PIDS $PID"; PORT=""
for _ in $(seq 1 600); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/serve.log" | grep -o '[0-9]*$')
  [ -n "$PORT" ] && grep -q ' ready ' "$T/serve.log" && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$PORT" ] || ! grep -q ' ready ' "$T/serve.log"; then bad "server did not start: $(cat "$T/serve.log")"; finish; fi
out=$(timeout 900 node tests/server/grammar.mjs "$PORT" 2>&1); rc=$?
echo "$out"
pass=$((pass + $(grep -c '^ok ' <<<"$out")))
fail=$((fail + $(grep -c '^FAIL ' <<<"$out")))
if [ "$rc" != 0 ] && ! grep -q '^FAIL ' <<<"$out"; then bad "grammar.mjs exited $rc"; fi
kill -TERM "$PID"
for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$PID" 2>/dev/null && { kill -KILL "$PID"; bad "server did not exit on SIGTERM"; }
wait "$PID" 2>/dev/null
finish
