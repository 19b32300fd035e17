#!/usr/bin/env bash
# tests/cli_bench_batched.sh: `celer bench -npl LIST`, llama-batched-bench's table: one
# row per (PP, TG, B) in its order, its ten columns, the token counts the run itself
# counted (N_KV = B x (PP + TG) cache tokens at the end, B x TG tokens generated in
# T_TG), S columns consistent with the T columns, json rows that parse, and usage
# errors (bad lists, combinations over the context) that exit 2 naming the flag.
. "$(dirname "$0")/lib.sh"
"$C" synth --shape tiny -o "$T/tiny" >/dev/null || { echo "FAIL synth tiny"; echo "@@ 0 passed 1 failed"; exit 1; }
M=$T/tiny   # llama shape, 2048 tokens of context

# md: the header, then rows PP-major, B innermost, with exact counts
out=$("$C" bench -m "$M" -npl 1,3,4 -p 8,13 -n 5,2 -t 1 2>"$T/err"); rc=$?
if [ $rc = 0 ] && grep -q '^|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |$' <<<"$out"; then
  ok "md header"; else bad "md header ($rc): $out $(cat "$T/err")"; fi
got=$(grep -E '^\| +[0-9]' <<<"$out" | awk -F'|' '{gsub(/ /,""); print $2","$3","$4","$5}' | tr '\n' ' ')
want=""
for p in 8 13; do for n in 5 2; do for b in 1 3 4; do want="$want$p,$n,$b,$((b * (p + n))) "; done; done; done
if [ "$got" = "$want" ]; then ok "md rows: PP, TG, B, N_KV"; else bad "md rows: got '$got' want '$want'"; fi
# each row's S columns from its T columns: S_PP = B*PP/T_PP, S_TG = B*TG/T_TG, S = N_KV/T, T = T_PP + T_TG
# (the printed T values are rounded to 1 ms, so compare speeds only where T is large enough to be read back)
cons=$(grep -E '^\| +[0-9]' <<<"$out" | awk -F'|' '{for(i=2;i<=11;i++){gsub(/ /,"",$i)}
  tp=$6; tt=$8; t=$10; bad=0
  if (t+0 < tp+tt-0.0015 || t+0 > tp+tt+0.0015) bad=1
  if ($7+0 <= 0 || $9+0 <= 0 || $11+0 <= 0) bad=1
  print bad}' | sort -u | tr -d '\n')
if [ "$cons" = "0" ]; then ok "md: T = T_PP + T_TG, speeds positive"; else bad "md consistency: $out"; fi
if grep -q '^pp13 tg2 B4: .* GB read per decode step (weights once + 4 caches) -> .* of the read bandwidth$' <<<"$out"; then
  ok "md: each row beside its bandwidth limit"; else bad "md limit lines: $out"; fi

# json: parses; the counts are the run's own; speeds are counts over times
"$C" bench -m "$M" -npl 2,5 -p 6 -n 3,7 -r 2 -t 1 -o json >"$T/j.json" 2>"$T/err"; rc=$?
chk=$(python3 - "$T/j.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
want = [(6, n, b) for n in (3, 7) for b in (2, 5)]
errs = []
if [(r["pp"], r["tg"], r["pl"]) for r in rows] != want: errs.append("order %s" % [(r["pp"], r["tg"], r["pl"]) for r in rows])
for r in rows:
    pp, tg, pl = r["pp"], r["tg"], r["pl"]
    if r["n_kv"] != pl * (pp + tg): errs.append("n_kv %d for %s" % (r["n_kv"], (pp, tg, pl)))
    if r["n_gen"] != pl * tg: errs.append("n_gen %d for %s" % (r["n_gen"], (pp, tg, pl)))
    if len(r["samples_t_pp"]) != 2 or len(r["samples_t_tg"]) != 2: errs.append("samples")
    if sorted(r["samples_t_tg"])[0] > r["t_tg"] or sorted(r["samples_t_tg"])[1] < r["t_tg"]: errs.append("median")
    for k, v in (("speed_pp", pl * pp / r["t_pp"]), ("speed_tg", pl * tg / r["t_tg"]), ("speed", r["n_kv"] / r["t"])):
        if abs(r[k] - v) > 1e-3 * v + 1e-2: errs.append("%s %g vs %g" % (k, r[k], v))
    if abs(r["t"] - r["t_pp"] - r["t_tg"]) > 1e-5: errs.append("t")
    if r["backend"] != "CPU" or r["n_threads"] != 1 or r["n_kv_max"] != 2048: errs.append("fields")
print("; ".join(errs) or "ok")
EOF
)
if [ $rc = 0 ] && [ "$chk" = ok ]; then ok "json rows and exact token counts"; else bad "json ($rc): $chk $(cat "$T/err")"; fi

# usage errors name the flag
expect "empty -npl" 2 "flag '--n-parallel' (-npl)" "$C" bench -m "$M" -npl ""
expect "zero in -npl" 2 "flag '--n-parallel' (-npl) wants a comma list" "$C" bench -m "$M" -npl 1,0,2
expect "non-numeric -npl" 2 "flag '--n-parallel' (-npl)" "$C" bench -m "$M" -npl 1,x
expect "trailing comma" 2 "flag '--n-parallel' (-npl)" "$C" bench -m "$M" -npl 1,2,
expect "zero in -p list" 2 "flag '--n-prompt' (-p)" "$C" bench -m "$M" -npl 1 -p 8,0
expect "bad -n list" 2 "flag '--n-gen' (-n)" "$C" bench -m "$M" -npl 1 -p 8 -n 4,4x
expect "sequence over the model's context" 2 "exceeds the model's context of 2048" "$C" bench -m "$M" -npl 1 -p 2000 -n 49
expect "N_KV over the default -c" 2 "need N_KV = 2050 cache tokens, over the 2048 of the model's context" \
  "$C" bench -m "$M" -npl 1,50 -p 40 -n 1
expect "N_KV over -c" 2 "flag '--n-parallel' (-npl): 4 sequences of 8 + 4 tokens need N_KV = 48 cache tokens, over the 47 of -c" \
  "$C" bench -m "$M" -npl 4 -p 8 -n 4 -c 47
expect "-c 48 holds it" 0 "" "$C" bench -m "$M" -npl 4 -p 8 -n 4 -c 48 -t 1
expect "-d with -npl" 2 "flag '--n-depth' (-d) is not used with -npl" "$C" bench -m "$M" -npl 2 -d 4
expect "-c without -npl" 2 "flag '-c' belongs to the batched mode" "$C" bench -m "$M" -c 100
expect "bad -o" 2 "-o wants md or json" "$C" bench -m "$M" -npl 2 -o csv

echo "@@ $pass passed $fail failed"
[ "$fail" = 0 ]
