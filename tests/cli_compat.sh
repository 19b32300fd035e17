#!/usr/bin/env bash
# tests/cli_compat.sh: the CLI as people coming from llama.cpp, ollama and mlx-lm use
# it (issue #20): other tools' flag spellings mean the same as celer's own, flags
# celer has no use for get a one-line hint, and the commands agree with each other
# (-n, end-of-sequence, the default model, usage errors exit 2, help CMD, the
# context inspect sizes the KV cache at). Outputs are compared with celer's own
# spelling of the same request, or with figures from the fixtures' config.json.
. "$(dirname "$0")/lib.sh"
unset CELER_DEFAULT_MODEL
M=tests/fixtures/models/llama   # no tokenizer; token 11 greedily gives 314,348 then EOS (2)
D=models/default                # has a tokenizer and a chat template

# ---- make run installs the Debian packages first, as make test does
if make -n run 2>/dev/null | grep -q 'scripts/deps.sh'; then ok "make run runs scripts/deps.sh"
else bad "make run does not run scripts/deps.sh: $(make -n run 2>&1 | head -3)"; fi

# ---- celer help CMD is CMD --help
expect "help run" 0 "usage: celer run" "$C" help run
expect "help generate" 0 "usage: celer generate" "$C" help generate
expect "help unknown" 2 "unknown command 'fly'" "$C" help fly

# ---- usage errors exit 2
expect "generate --tokens a,b" 2 "is not a token id" "$C" generate -m "$M" --tokens a,b
expect "cache --tokens a,b" 2 "is not a token id" "$C" cache -m "$M" --tokens a,b
expect "logits --tokens a,b" 2 "is not a token id" "$C" logits -m "$M" --tokens a,b -o "$T/x"
expect "--stop-token a" 2 "is not a token id" "$C" generate -m "$M" --tokens 1 --stop-token a
expect "generate --device gpu" 2 "flag '--device' wants cpu, cuda, cuda:N or auto, got 'gpu'" \
  "$C" generate -m "$M" --tokens 1 --device gpu
expect "run --device gpu" 2 "flag '--device'" "$C" run "$M" -p hi --device gpu
expect "bench --device cuda:x" 2 "flag '--device'" "$C" bench -m "$M" --device cuda:x
expect "serve --device gpu" 2 "flag '--device'" "$C" serve -m "$M" --device gpu
printf '1 x\n' > "$T/badtok"
expect "bad --tokens-file content: 1" 1 "is not a token id" "$C" generate -m "$M" --tokens-file "$T/badtok"

# ---- other tools' spellings mean celer's flag
want=$("$C" generate -m "$M" --tokens 5,6 -n 3 --device cpu --temp 0 2>/dev/null)
check "--max-tokens = -n (mlx-lm)" "$("$C" generate -m "$M" --tokens 5,6 --max-tokens 3 2>/dev/null)" "$want"
check "--max-tokens=N" "$("$C" generate -m "$M" --tokens 5,6 --max-tokens=3 2>/dev/null)" "$want"
check "--temperature = --temp (mlx-lm)" "$("$C" generate -m "$M" --tokens 5,6 -n 3 --temperature 0 2>/dev/null)" "$want"
check "-ngl 0 = --device cpu" "$("$C" generate -m "$M" --tokens 5,6 -n 3 -ngl 0 2>/dev/null)" "$want"
# -ngl N > 0 asks for the GPU: with no CUDA library there, the error names --device cuda
expect "-ngl 99 = --device cuda" 1 "--device cuda" env CELER_CUDA_LIB="$T/none.so" "$C" generate -m "$M" --tokens 1 -ngl 99
expect "--n-gpu-layers=99 = --device cuda" 1 "--device cuda" env CELER_CUDA_LIB="$T/none.so" "$C" bench -m "$M" --n-gpu-layers=99 -p 4 -n 0 -r 1
expect "-ngl x" 2 "wants a layer count" "$C" generate -m "$M" --tokens 1 -ngl x
expect "--max-tokens where there is no -n" 2 "unknown flag '--max-tokens'" "$C" logits -m "$M" --tokens 1 --max-tokens 3 -o "$T/x"
# serve's own --max-tokens (a per-request limit) is not -n
out=$("$C" serve --help)
if grep -q -- '--max-tokens N .*max_tokens a request may ask for' <<<"$out" && ! grep -q -- '--max-tokens N *= -n' <<<"$out"; then
  ok "serve keeps its own --max-tokens"; else bad "serve --max-tokens: $(grep -- --max-tokens <<<"$out")"; fi
out=$("$C" generate --help)
if grep -q -- '--max-tokens N *= -n' <<<"$out" && grep -q -- '-ngl, --n-gpu-layers N' <<<"$out" && grep -q -- '-f, --file FILE' <<<"$out"; then
  ok "generate --help lists the other spellings"; else bad "generate --help: $out"; fi

# ---- -f FILE is the prompt; -sys TEXT the system message
printf 'The capital of France' > "$T/prompt"
check "generate -f = -p" "$("$C" generate -m "$D" -f "$T/prompt" -n 6 2>/dev/null)" \
  "$("$C" generate -m "$D" -p 'The capital of France' -n 6 2>/dev/null)"
expect "generate -f missing file" 1 "$T/none: cannot open" "$C" generate -m "$D" -f "$T/none"
expect "generate -p and -f" 2 "exactly one of" "$C" generate -m "$D" -p x -f "$T/prompt"
printf 'Hello there\n' > "$T/msg"
check "run -f = -p" "$("$C" run "$D" -f "$T/msg" -n 6 --temp 0 -q 2>/dev/null)" \
  "$("$C" run "$D" -p 'Hello there' -n 6 --temp 0 -q 2>/dev/null)"
expect "run -p and -f" 2 "give -p or -f, not both" "$C" run "$D" -p x -f "$T/msg"
sys_run=$("$C" run "$D" -p 'Hello there' --system 'Answer in French.' -n 8 --temp 0 -q 2>/dev/null)
check "run -sys = --system" "$("$C" run "$D" -p 'Hello there' -sys 'Answer in French.' -n 8 --temp 0 -q 2>/dev/null)" "$sys_run"
check "run --system-prompt = --system" \
  "$("$C" run "$D" -p 'Hello there' --system-prompt 'Answer in French.' -n 8 --temp 0 -q 2>/dev/null)" "$sys_run"
# generate --chat --system renders [system, user] as run does for its first turn
sys_gen=$("$C" generate -m "$D" --chat 'Hello there' --system 'You are a pirate.' -n 8 2>/dev/null)
check "generate --chat -sys = --system" "$("$C" generate -m "$D" --chat 'Hello there' -sys 'You are a pirate.' -n 8 2>/dev/null)" "$sys_gen"
nosys=$("$C" generate -m "$D" --chat 'Hello there' -n 8 2>/dev/null)
if [ "$sys_gen" != "$nosys" ]; then ok "generate --system changes the answer"; else bad "generate --system had no effect: '$sys_gen'"; fi
# the prompt it feeds is the chat template's: the same answer as chat-template + tokenize
printf '[{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello there"}]' > "$T/msgs.json"
"$C" chat-template -m "$D" --messages "$T/msgs.json" --add-generation-prompt > "$T/rendered"
ids=$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$T/rendered" | "$C" tokenize -m "$D" | tr -d '[] ')
gen_ids=$("$C" generate -m "$D" --tokens "$ids" -n 8 2>/dev/null)
gen_text=$(echo "[$gen_ids]" | "$C" detokenize -m "$D" --skip-special | python3 -c 'import json,sys; print(json.loads(sys.stdin.read()))')
check "generate --chat --system = the template's prompt" "$sys_gen" "$gen_text"
expect "--system without --chat" 2 "--system needs --chat" "$C" generate -m "$D" -p x --system y

# ---- flags celer has no use for: a note, or a usage error saying what to do
expect "-fa: not needed" 0 "-fa: flash attention is always on here" "$C" generate -m "$M" --tokens 1 -n 1 -fa
expect "-fa on: its value is taken too" 0 "-fa: flash attention" "$C" generate -m "$M" --tokens 1 -n 1 -fa on
expect "--jinja: not needed" 0 "--jinja: chat templates are always" "$C" generate -m "$M" --tokens 1 -n 1 --jinja
expect "run -cnv: not needed" 0 "celer run is always a conversation" "$C" run "$D" -p hi -n 1 -q -cnv
expect "generate -cnv: use run" 2 "-cnv: a conversation is celer run" "$C" generate -m "$M" --tokens 1 -cnv
expect "-hf: give the hub name" 2 "-hf: give the hub name as the model" "$C" run -hf org/name
expect "still unknown" 2 "unknown flag '--frobnicate'" "$C" run "$D" --frobnicate

# ---- -n: 0 is nothing, -1 no limit, in run as in generate
check "generate -n 0: nothing" "$("$C" generate -m "$M" --tokens 11 -n 0 2>/dev/null)" ""
check "run -n 0: nothing" "$("$C" run "$D" -p 'Hello there' -n 0 -q 2>/dev/null)" ""
check "generate -n -1: until end-of-sequence" "$("$C" generate -m "$M" --tokens 11 -n -1 2>/dev/null)" "314,348,2"
# a full context ends generate as the server ends a request (length), exit 0
out=$("$C" generate -m "$M" --tokens 11,5,6 -c 5 -n 10 2>&1); rc=$?
check "generate at a full context: the tokens it made, exit 0" "$rc $out" "0 $("$C" generate -m "$M" --tokens 11,5,6 -n 3 2>/dev/null)"

# ---- cache -n ends after end-of-sequence, as generate does
check "cache -n stops at EOS" "$("$C" cache -m "$M" --tokens 11 -n 10 2>/dev/null)" "314,348,2"
check "cache -n = generate" "$("$C" cache -m "$M" --tokens 4 -n 40 2>/dev/null)" "$("$C" generate -m "$M" --tokens 4 -n 40 2>/dev/null)"

# ---- tokenize, detokenize, chat-template use the default model as the other commands do
want=$(echo '"Hello world"' | "$C" tokenize -m "$D")
check "tokenize: the default model" "$(cd "$T" && echo '"Hello world"' | CELER_DEFAULT_MODEL="$OLDPWD/$D" "$OLDPWD/$C" tokenize)" "$want"
check "tokenize from the checkout: the default model" "$(echo '"Hello world"' | "$C" tokenize)" "$want"
check "detokenize: the default model" "$(tr -d ' ' <<<"$want" | "$C" detokenize)" '"Hello world"'
printf '[{"role": "user", "content": "hi"}]' > "$T/m1.json"
check "chat-template: the default model" "$("$C" chat-template --messages "$T/m1.json")" \
  "$("$C" chat-template -m "$D" --messages "$T/m1.json")"
expect "tokenize: the default model missing" 1 "no such" env CELER_DEFAULT_MODEL="$T/none" "$C" tokenize --text hi
expect "tokenize plain text: says what a line is" 1 'each line is one JSON string, like "Hello"' bash -c "echo hello | '$C' tokenize"
expect "detokenize plain text: says what a line is" 1 'each line is one JSON array of token ids' bash -c "echo hello | '$C' detokenize"

# ---- inspect sizes the KV cache at run's and serve's default context and says which
mkdir -p "$T/long"
for f in "$M"/*; do ln -s "$PWD/$f" "$T/long/"; done
rm "$T/long/config.json"
sed 's/"max_position_embeddings": 4096/"max_position_embeddings": 32768/' "$M/config.json" > "$T/long/config.json"
out=$("$C" inspect -m "$T/long")
check "inspect: kv at 4096 for a 32768 model" "$(grep '^kv at' <<<"$out" | cut -d: -f1)" "kv at 4096"
check "inspect: says which context" "$(grep '^context:' <<<"$out")" \
  "context:        4096 (as run and serve use by default: the model's max context, at most 4096; -c to change)"
check "inspect -c: given" "$("$C" inspect -m "$T/long" -c 100 | grep '^context:')" "context:        100 (given by -c)"
check "inspect: a 1024 model" "$("$C" inspect -m "$D" | grep '^context:')" \
  "context:        1024 (the model's max context, as run and serve use by default)"

finish
