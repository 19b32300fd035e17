#!/usr/bin/env bash
# tests/cli_sampling.sh: `celer generate`'s sampling flags on the default model:
# greedy stays the default (and equals --temp 0 and transformers' ids), a seed
# reproduces its output, a stop token ends it, and bad values are usage errors.
. "$(dirname "$0")/lib.sh"
M=models/default
P=0,301,359,477,294,606   # "And it came to pass"

want=17,439,264,416,506,3301,372,491,294,264,416,506   # transformers' greedy ids
check "greedy default" "$("$C" generate -m $M --tokens $P -n 12 2>/dev/null)" "$want"
check "temp 0 is greedy" "$("$C" generate -m $M --tokens $P -n 12 --temp 0 --seed 3 2>/dev/null)" "$want"
a=$("$C" generate -m $M --tokens $P -n 24 --temp 0.9 --seed 11 --top-k 20 --repeat-penalty 1.2 2>/dev/null)
b=$("$C" generate -m $M --tokens $P -n 24 --temp 0.9 --seed 11 --top-k 20 --repeat-penalty 1.2 2>/dev/null)
c=$("$C" generate -m $M --tokens $P -n 24 --temp 0.9 --seed 12 --top-k 20 --repeat-penalty 1.2 2>/dev/null)
check "seed reproduces" "$a" "$b"
if [[ "$a" =~ ^[0-9]+(,[0-9]+){23}$ ]]; then ok "sampled output form"; else bad "sampled output form: '$a'"; fi
if [ "$a" != "$c" ]; then ok "seeds differ"; else bad "seeds 11 and 12 gave the same 24 tokens"; fi
# greedy continues 17,439,...: stopping on 439 ends after two tokens
check "stop token" "$("$C" generate -m $M --tokens $P -n 12 --stop-token 439 2>/dev/null)" "17,439"
out=$("$C" generate -m $M --tokens $P --top-p 1.5 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "flag '--top-p' wants a number" <<<"$out"; then ok "bad --top-p"; else bad "bad --top-p: $rc $out"; fi
out=$("$C" generate -m $M --tokens $P --stop-token 5000 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "stop token 5000" <<<"$out"; then ok "stop token outside vocab"; else bad "stop token outside vocab: $rc $out"; fi
finish
