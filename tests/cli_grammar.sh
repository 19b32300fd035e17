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
need_openai
start serve -m models/default -np 3 -c 2048 || finish
node_script 900 tests/server/grammar.mjs "$PORT"
stop "$PID" && ok "server: clean exit" || bad "server exit $?: $(tail -3 "$T/serve.log")"
finish
