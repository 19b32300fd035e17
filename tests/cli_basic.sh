#!/usr/bin/env bash
# tests/cli_basic.sh: the `celer` command as scripts use it: --help everywhere,
# usage errors exit 2 naming the flag, model errors exit 1 naming the file, and the
# outputs (logits safetensors, generated ids, bench tables) in their exact forms.
. "$(dirname "$0")/lib.sh"
M=tests/fixtures/models/llama

for cmd in logits generate bench synth; do
  expect "$cmd --help" 0 "usage: celer $cmd" "$C" "$cmd" --help
  expect "$cmd unknown flag" 2 "unknown flag '--frobnicate'" "$C" "$cmd" --frobnicate
done
expect "no command" 2 "usage: celer COMMAND" "$C"
expect "unknown command" 2 "unknown command 'fly'" "$C" fly
expect "help" 0 "commands:" "$C" --help
expect "missing value" 2 "flag '-n' needs a value" "$C" generate -m "$M" --tokens 1 -n
expect "bad integer" 2 "flag '--chunk' wants an integer" "$C" logits -m "$M" --tokens 1 --chunk 0 -o "$T/x"
expect "default model missing" 1 "no such checkpoint directory" env CELER_DEFAULT_MODEL="$T/none" "$C" generate --tokens 1
out=$("$C" generate --tokens 0,301,359 -n 3 2>/dev/null)
if [[ "$out" =~ ^[0-9]+,[0-9]+,[0-9]+$ ]]; then ok "generate without -m uses the default model"; else bad "default model: '$out'"; fi
expect "both token sources" 2 "exactly one of --tokens" "$C" logits -m "$M" --tokens 1 --tokens-file x -o "$T/x"
expect "bad token list" 2 "'x' is not a token id" "$C" generate -m "$M" --tokens 1,x
expect "token out of range" 1 "token id 512" "$C" generate -m "$M" --tokens 1,512
expect "missing model dir" 1 "no such checkpoint directory" "$C" generate -m "$T/none" --tokens 1
expect "unknown shape" 1 "unknown shape \"nope\"" "$C" synth --shape nope -o "$T/s"

# generate prints exactly the generated ids, comma separated, on one line
out=$("$C" generate -m "$M" --tokens 5,6,7 -n 4 2>/dev/null)
if [[ "$out" =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]]; then ok "generate output form"; else bad "generate output form: '$out'"; fi

# logits writes one F32 tensor "logits" [T, V]; chunked feeding gives the same rows
"$C" logits -m "$M" --tokens 5,6,7,8,9 -o "$T/a.safetensors" && "$C" logits -m "$M" --tokens 5,6,7,8,9 --chunk 2 -o "$T/b.safetensors"
hdr=$(head -c 200 "$T/a.safetensors" | tr -d '\0' | grep -ao '"logits":{[^}]*}')
if grep -q '"dtype":"F32"' <<<"$hdr" && grep -q '"shape":\[5,512\]' <<<"$hdr"; then ok "logits file form"; else bad "logits file form: $hdr"; fi
# logits of a named shape's random weights (no checkpoint; on the CPU the sparse file's zeros)
"$C" logits --synth tiny --tokens 1,2,3 -o "$T/s.safetensors" --device cpu
hdr=$(head -c 200 "$T/s.safetensors" 2>/dev/null | tr -d '\0' | grep -ao '"logits":{[^}]*}')
if grep -q '"shape":\[3,256\]' <<<"$hdr"; then ok "logits --synth"; else bad "logits --synth: $hdr"; fi
expect "logits --synth with -m" 2 "give -m DIR or --synth NAME, not both" "$C" logits --synth tiny -m "$M" --tokens 1 -o "$T/x"
expect "logits --synth unknown shape" 1 "unknown shape \"nope\"" "$C" logits --synth nope --tokens 1 -o "$T/x"
printf '5 6\n7,8\n9\n' > "$T/toks"
"$C" logits -m "$M" --tokens-file "$T/toks" -o "$T/c.safetensors"
if cmp -s "$T/a.safetensors" "$T/c.safetensors"; then ok "tokens-file same as --tokens"; else bad "tokens-file differs"; fi

# a cache saved after a prefix, loaded for the rest, gives the same rows as one run
# that feeds the same batches (3 tokens, then 2), bit for bit
"$C" logits -m "$M" --tokens 5,6,7,8,9 --chunk 3 -o "$T/a3.safetensors"
"$C" logits -m "$M" --tokens 5,6,7 -o "$T/p.safetensors" --save-cache "$T/kv.safetensors" &&
  "$C" logits -m "$M" --tokens 8,9 --load-cache "$T/kv.safetensors" -o "$T/q.safetensors"
if [ -f "$T/q.safetensors" ] && cmp -s <(tail -c 4096 "$T/a3.safetensors") <(tail -c 4096 "$T/q.safetensors"); then
  ok "logits --save-cache / --load-cache"; else bad "logits with a loaded cache differs from one run"; fi
expect "load a missing cache" 1 "nope.safetensors" "$C" logits -m "$M" --tokens 1 --load-cache "$T/nope.safetensors" -o "$T/x"

# generate: a chat message through the template, and a generation continued from a
# saved cache equals one run (the default model; the cache holds prompt + fed tokens)
out=$("$C" generate --chat "Who made the heaven?" -n 8 --temp 0 2>/dev/null)
if [ -n "$out" ] && ! [[ "$out" =~ ^[0-9,]+$ ]]; then ok "generate --chat prints text"; else bad "generate --chat: '$out'"; fi
first=$("$C" generate --tokens 0,301,359,477 -n 3 --save-cache "$T/g.kv" 2>/dev/null)
third=${first##*,}; fed=${first%,*}
cont=$("$C" generate --tokens "$third" --load-cache "$T/g.kv" -n 5 2>/dev/null)
fresh=$("$C" generate --tokens "0,301,359,477,$fed,$third" -n 5 2>/dev/null)
if [ -n "$cont" ] && [ "$cont" = "$fresh" ]; then ok "generate --save-cache / --load-cache"; else bad "generate from a cache: '$cont' vs '$fresh'"; fi

# synth + bench: the llama-bench table and the json rows
"$C" synth --shape tiny -o "$T/tiny" && ok "synth tiny" || bad "synth tiny"
out=$("$C" bench -m "$T/tiny" -p 16 -n 8 -r 2 -t 1 2>/dev/null)
if grep -q '^| model ' <<<"$out" && grep -q '| *pp16 |' <<<"$out" && grep -q '| *tg8 |' <<<"$out" && grep -q '% of \(the \)\?read bandwidth' <<<"$out"; then
  ok "bench md"; else bad "bench md: $out"; fi
out=$("$C" bench -m "$T/tiny" -p 16 -n 0 -r 1 -t 1 -o json 2>/dev/null)
if grep -q '"test": "pp16"' <<<"$out" && grep -q '"avg_ts"' <<<"$out" && [ "$(head -c1 <<<"$out")" = "[" ]; then ok "bench json"; else bad "bench json: $out"; fi
# nothing on stderr when stderr is not a terminal
err=$("$C" generate -m "$T/tiny" --tokens 1,2 -n 3 2>&1 >/dev/null)
if [ -z "$err" ]; then ok "quiet in pipes"; else bad "stderr in a pipe: $err"; fi

finish
