#!/usr/bin/env bash
# tests/cli_loadgen.sh: the server load benchmark's generator (tests/server/loadgen.c,
# docs/benchmarks/server.md) against a live `celer serve` on the default model: every
# request streams exactly MAX_TOKENS tokens (ignore_eos), so the tokens it counts are
# REQUESTS x MAX_TOKENS; the quantiles are ordered; the JSON line has every key; its
# --table turns JSON lines into one markdown row each; bad arguments exit 2. No timing
# is asserted.
. "$(dirname "$0")/lib.sh"
PID=""
if ! cc -O2 -pthread tests/server/loadgen.c -o "$T/loadgen" 2>"$T/cc.log"; then
  echo "FAIL build loadgen: $(cat "$T/cc.log")"; echo "@@ 0 passed 1 failed"; exit 1
fi
"$C" serve --port 0 -np 4 -t 1 >"$T/serve.log" 2>&1 &
PID=$!
PORT=""
for _ in $(seq 1 600); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/serve.log" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && grep -q ' ready ' "$T/serve.log" && break
  sleep 0.2
done
if [ -z "$PORT" ]; then echo "FAIL server did not start: $(cat "$T/serve.log")"; echo "@@ 0 passed 1 failed"; exit 1; fi

out=$("$T/loadgen" "$PORT" 3 7 5 12); rc=$?
echo "$out" >"$T/a.jsonl"
chk=$(python3 - "$out" <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
keys = ["concurrency", "requests", "prompt_words", "max_tokens", "seconds", "req_per_s", "tokens", "out_tok_per_s",
        "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "itl_mean_ms", "decode_tok_per_s", "errors"]
errs = [k for k in keys if k not in r]
if not errs:
    if (r["concurrency"], r["requests"], r["prompt_words"], r["max_tokens"]) != (3, 7, 12, 5): errs.append("echo")
    if r["tokens"] != 7 * 5: errs.append("tokens %d, want 35" % r["tokens"])
    if r["errors"] != 0: errs.append("errors")
    if not 0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"]: errs.append("ttft order")
    if not 0 <= r["itl_p50_ms"] <= r["itl_p99_ms"]: errs.append("itl order")
    # seconds is printed to the millisecond: a 31 ms run can be 0.5 ms off, 1.6% of the rate
    slack = 0.5 + r["out_tok_per_s"] * 0.0005
    if r["out_tok_per_s"] <= 0 or abs(r["out_tok_per_s"] * r["seconds"] - 35) > slack: errs.append("out_tok_per_s")
print("; ".join(errs) or "ok")
EOF
)
if [ $rc = 0 ] && [ "$chk" = ok ]; then ok "json: every key, tokens = requests x max_tokens, ordered quantiles"; else bad "json ($rc): $chk: $out"; fi

"$T/loadgen" "$PORT" 1 2 3 4 >>"$T/a.jsonl"
tab=$("$T/loadgen" --table "$T/a.jsonl")
rows=$(grep -c '^| [0-9]' <<<"$tab")
if [ "$rows" = 2 ] && grep -q '^| clients | requests | prompt words | max tokens | output tok/s | TTFT p50 ms' <<<"$tab" &&
   grep -q '^| 3 | 7 | 12 | 5 |' <<<"$tab" && grep -q '^| 1 | 2 | 4 | 3 |' <<<"$tab"; then
  ok "--table: one row per JSON line"; else bad "--table: $tab"; fi
md=$("$T/loadgen" "$PORT" 1 1 2 -o md)
if [ "$(grep -c '^| 1 | 1 | 32 | 2 |' <<<"$md")" = 1 ]; then ok "-o md row"; else bad "-o md: $md"; fi

"$T/loadgen" "$PORT" 0 1 1 >/dev/null 2>&1; rc=$?
if [ $rc = 2 ]; then ok "zero clients: exit 2"; else bad "zero clients: exit $rc"; fi
"$T/loadgen" "$PORT" 1 >/dev/null 2>&1; rc=$?
if [ $rc = 2 ]; then ok "missing arguments: exit 2"; else bad "missing arguments: exit $rc"; fi

echo "@@ $pass passed $fail failed"
[ "$fail" = 0 ]
