#!/usr/bin/env bash
# tests/cli_inspect.sh: `celer arch` (the families, exactly, and the same model_type
# values the loader names when it refuses one) and `celer inspect` (parameters,
# formats, weight bytes, KV bytes per token and per context by cache kind, whether it
# fits) against figures computed by hand from the fixtures' config.json files.
. "$(dirname "$0")/lib.sh"
unset CELER_DEFAULT_MODEL
line() { grep "^$1" <<<"$2"; }  # the line of inspect's output that starts with $1
expect() { # name, wanted exit code, grep pattern for output, command...
  local name=$1 want=$2 pat=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pat" <<<"$out"; then ok "$name"; else bad "$name ($rc, want $want): $out"; fi
}

# ---- arch ----
want='FAMILY     NAME       MODEL_TYPE
llama      Llama      llama
qwen3      Qwen3      qwen3
gemma3     Gemma 3    gemma3_text, gemma3
gemma4     Gemma 4    gemma4_text, gemma4
gpt_oss    gpt-oss    gpt_oss
exaone4    EXAONE 4   exaone4
qwen2      Qwen 2     qwen2
mistral    Mistral    mistral
phi3       Phi-3      phi3
gemma2     Gemma 2    gemma2
mixtral    Mixtral    mixtral
smollm3    SmolLM3    smollm3
olmo2      OLMo 2     olmo2'
check "arch" "$("$C" arch)" "$want"
check "arch --json line" "$("$C" arch --json | sed -n 3p)" \
  '{"family": "gemma3", "name": "Gemma 3", "model_types": ["gemma3_text", "gemma3"]}'
expect "arch --help" 0 "usage: celer arch" "$C" arch --help
expect "arch extra argument" 2 "unexpected argument 'llama'" "$C" arch llama
# the loader's own list (its error for an unknown model_type) is arch's list
mkdir -p "$T/nope" && echo '{"model_type": "nope"}' >"$T/nope/config.json"
printf '\002\0\0\0\0\0\0\0{}' >"$T/nope/model.safetensors"  # no tensors
err=$("$C" inspect -m "$T/nope" 2>&1); rc=$?
loader=$(grep -o 'supported: [^)]*' <<<"$err" | sed 's/supported: //')
listed=$("$C" arch | tail -n +2 | cut -c23- | sed 's/, /,/g' | paste -sd, | sed 's/,/, /g')
if [ $rc = 1 ] && [ -n "$loader" ] && [ "$loader" = "$listed" ]; then ok "arch lists what the loader reads"
else bad "arch vs loader ($rc): '$listed' vs '$loader' ($err)"; fi

# ---- inspect: the default model, a dense Llama ----
# config: 8 layers, 4 KV heads of 32 -> K+V float32 = 2*4*32*4 = 1024 bytes per layer per token
out=$("$C" inspect 2>&1); rc=$?
check "inspect default: exit" "$rc" 0
check "family" "$(line family: "$out")" "family:         llama (Llama), model_type llama"
check "parameters" "$(line parameters: "$out")" "parameters:     7344384 (7.34 M)"
check "shape" "$(line shape: "$out")" "shape:          8 layers, hidden 256, vocab 4096, max context 1024"
check "format" "$(line format: "$out")" "format:         q4/g64 (projections); config dtype bfloat16"
bytes=$(stat -c %s models/default/model.safetensors)
hdr=$(od -An -tu8 -N8 models/default/model.safetensors | tr -d ' ')
check "weights: the file's data bytes" "$(line weights: "$out" | grep -o '^weights: *[0-9]*' | grep -o '[0-9]*$')" \
  "$((bytes - 8 - hdr))"
check "kv per token (dense)" "$(line 'kv per token:' "$out")" \
  "kv per token:   8192 bytes (8.0 KiB): dense 8 layers 8192, rotating 0 layers 0"
check "kv at the max context" "$(line 'kv at' "$out")" "kv at 1024:     8388608 bytes (8.0 MiB): dense 8388608, rotating 0"
if grep -q "^memory:         weights + kv [0-9]* bytes (.*) of .* available: fits$" <<<"$out"; then ok "memory: MemAvailable"
else bad "memory line: $(line memory: "$out")"; fi
check "kv at -c 100" "$("$C" inspect -c 100 | grep '^kv at')" "kv at 100:      819200 bytes (800.0 KiB): dense 819200, rotating 0"

# ---- inspect: gemma3, sliding window 16 on layers 0,1,3,4 and full attention on 2,5 ----
# 2 KV heads of 32 -> 512 bytes per layer per token; rotating layers hold 16 rows
G=tests/fixtures/models/gemma3
out=$("$C" inspect -m $G -c 4096 2>&1)
check "gemma3 kv per token" "$(line 'kv per token:' "$out")" \
  "kv per token:   3072 bytes (3.0 KiB): dense 2 layers 1024, rotating 4 layers 2048 (until the window of 16 fills)"
# dense 2*512*4096 = 4194304, rotating 4*512*16 = 32768
check "gemma3 kv at 4096" "$(line 'kv at' "$out")" "kv at 4096:     4227072 bytes (4.0 MiB): dense 4194304, rotating 32768"
# a context within the window: every layer dense (6*512*10); one past it: rotating again
check "gemma3 kv at 10" "$("$C" inspect -m $G -c 10 | grep '^kv at')" "kv at 10:       30720 bytes (30.0 KiB): dense 30720, rotating 0"
check "gemma3 kv at 17" "$("$C" inspect -m $G -c 17 | grep '^kv at')" "kv at 17:       50176 bytes (49.0 KiB): dense 17408, rotating 32768"
check "gemma3 default -c: max context" "$("$C" inspect -m $G | grep '^kv at' | cut -d: -f1)" "kv at 4096"
check "gemma3 weights: BF16 only" "$(line weights: "$out" | sed 's/.*tensors: //')" "BF16 2038784"

# ---- inspect: mistral, a window of 16 on every layer: every cache a rotating one ----
# 3 layers, 2 KV heads of 32 -> 512 bytes per layer per token; each ring holds 16 rows
M=tests/fixtures/models/mistral
check "mistral kv per token" "$("$C" inspect -m $M -c 4096 | grep '^kv per token:')" \
  "kv per token:   1536 bytes (1.5 KiB): dense 0 layers 0, rotating 3 layers 1536 (until the window of 16 fills)"
check "mistral kv at 4096" "$("$C" inspect -m $M -c 4096 | grep '^kv at')" "kv at 4096:     24576 bytes (24.0 KiB): dense 0, rotating 24576"
check "mistral kv at 10" "$("$C" inspect -m $M -c 10 | grep '^kv at')" "kv at 10:       15360 bytes (15.0 KiB): dense 15360, rotating 0"

# ---- inspect: gemma2, sliding (0, 2) and full (1, 3) layers alternating ----
# dense 2*512*4096 = 4194304, rotating 2*512*16 = 16384
G2=tests/fixtures/models/gemma2
check "gemma2 kv per token" "$("$C" inspect -m $G2 -c 4096 | grep '^kv per token:')" \
  "kv per token:   2048 bytes (2.0 KiB): dense 2 layers 1024, rotating 2 layers 1024 (until the window of 16 fills)"
check "gemma2 kv at 4096" "$("$C" inspect -m $G2 -c 4096 | grep '^kv at')" "kv at 4096:     4210688 bytes (4.0 MiB): dense 4194304, rotating 16384"

# ---- fits or not ----
expect "--memory 1K: does not fit" 0 "of 1.0 KiB given by --memory: does not fit (.* short; a smaller -c shrinks the kv)" \
  "$C" inspect --memory 1K
expect "--memory 2G: fits" 0 "of 2.0 GiB given by --memory: fits$" "$C" inspect --memory 2G
expect "--memory bad" 2 "flag '--memory' wants a size such as 16G" "$C" inspect --memory lots
expect "-c 0" 2 "flag '--ctx-size' wants an integer in 1" "$C" inspect -c 0
expect "inspect missing dir" 1 "$T/none" "$C" inspect -m "$T/none"
expect "inspect unknown flag" 2 "unknown flag '--frobnicate'" "$C" inspect --frobnicate
expect "inspect --help" 0 "KV cache bytes per token" "$C" inspect --help
finish
