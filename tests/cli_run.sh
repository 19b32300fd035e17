#!/usr/bin/env bash
# tests/cli_run.sh: `celer run` as scripts use it: -p answers once with standard
# input closed (default model, greedy: transformers' answer), the model given as
# MODEL_DIR or -m, turns read from a pipe, --quiet, --stop, and `generate -p`
# printing text.
. "$(dirname "$0")/lib.sh"

# transformers' greedy answer to [{user: "In the beginning"}] (docs/default-model.md)
want="of the reign of Asa king of Judah began Ahaziah the son of Ahaziah king of Judah king of Judah, and reigned in his stead."
check "run -p, stdin closed" "$("$C" run -p "In the beginning" --temp 0 2>/dev/null <&-)" "$want"
check "run MODEL_DIR -p" "$("$C" run models/default -p "In the beginning" --temp 0 -q </dev/null)" "$want"
check "run -m DIR -p" "$("$C" run -m models/default -p "In the beginning" --temp 0 -q </dev/null)" "$want"
err=$("$C" run -p "In the beginning" --temp 0 2>&1 >/dev/null </dev/null)
if grep -q "^\[28 tokens, .* tok/s; prompt 9 new + 0 cached\]$" <<<"$err"; then ok "summary on stderr"; else bad "summary on stderr: '$err'"; fi
check "--quiet" "$("$C" run -p "In the beginning" --temp 0 -q 2>&1 >/dev/null </dev/null)" ""
out=$(printf 'In the beginning\n/stats\n' | "$C" run --temp 0 -q)
if grep -qF "$want" <<<"$out" && grep -q "^context: 36 of 1024 tokens; 1 turns$" <<<"$out"; then ok "turns from a pipe"
else bad "turns from a pipe: '$out'"; fi
a=$("$C" run -p "And God said" --seed 9 -q </dev/null); b=$("$C" run -p "And God said" --seed 9 -q </dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "seeded answer reproduces"; else bad "seeded answer: '$a' vs '$b'"; fi
out=$("$C" run -m /nonexistent/model -p hi 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "/nonexistent/model" <<<"$out"; then ok "missing model"; else bad "missing model: $rc $out"; fi
out=$("$C" run models/default -m models/default -p hi 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "give the model once" <<<"$out"; then ok "model twice"; else bad "model twice: $rc $out"; fi
check "generate -p prints text" "$("$C" generate -m models/default -p "And it came to pass" -n 12 2>/dev/null)" \
  ", when the king's decree was come to the king's"
# --stop cuts the text where the stop string begins, across token boundaries
check "generate --stop" "$("$C" generate -m models/default -p "And it came to pass" -n 40 --stop "king's house" 2>/dev/null)" \
  ", when the king's decree was come to the "
check "run --stop" "$("$C" run -q -p "In the beginning" --temp 0 --stop Judah </dev/null)" "of the reign of Asa king of "
out=$("$C" generate -m models/default --tokens 0,1 --stop x 2>&1); rc=$?
if [ $rc = 2 ] && grep -q -- "--stop needs a text prompt" <<<"$out"; then ok "--stop without -p"; else bad "--stop without -p: $rc $out"; fi
# a small context drops the oldest exchanges instead of failing
out=$(printf 'In the beginning\nAnd it came to pass\nBlessed are\nThe LORD\n' | "$C" run --temp 0 -c 128 -n 40 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "^(dropped the 1 oldest exchange to fit the context)$" <<<"$out"; then ok "context full drops old turns"
else bad "context full drops old turns: $rc $out"; fi
finish
