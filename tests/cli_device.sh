#!/usr/bin/env bash
# tests/cli_device.sh: --device on the commands that load a model. cpu gives the same
# tokens as auto (no GPU in this suite: tests/run.sh sets CELER_DEVICE=cpu, and a
# plain auto falls back to the CPU where no GPU driver is present); bad values and a
# GPU where none can be used are one clear error naming the device and a non-zero
# exit. `make test-cuda` runs the GPU side on the GPU machine.
. "$(dirname "$0")/lib.sh"

for cmd in generate logits bench serve run cache; do
  if "$C" $cmd --help 2>&1 | grep -q -- "--device DEV .*cpu, cuda, cuda:N or auto"; then ok "$cmd --help names --device"
  else bad "$cmd --help lacks --device"; fi
done

a=$("$C" generate --device cpu --tokens 0,301,359 -n 5 2>/dev/null); rc=$?
b=$(env -u CELER_DEVICE "$C" generate --tokens 0,301,359 -n 5 2>/dev/null)
if [ $rc = 0 ] && [ -n "$a" ] && { [ -e /dev/nvidiactl ] || [ "$a" = "$b" ]; }; then ok "--device cpu = auto here ($a)"
else bad "--device cpu ($rc): '$a' vs auto '$b'"; fi

for dev in bogus cuda:x cuda:-1 cudax; do
  out=$("$C" generate --device "$dev" --tokens 1,2 -n 1 2>&1); rc=$?
  # a usage error: exit 2, its first line names the flag and the value
  if [ $rc = 2 ] && head -1 <<<"$out" | grep -q "error: flag '--device' .*'$dev'"; then ok "--device $dev: $(head -1 <<<"$out")"
  else bad "--device $dev ($rc): $out"; fi
done
out=$(CELER_DEVICE=bogus "$C" generate --tokens 1,2 -n 1 2>&1); rc=$?
if [ $rc != 0 ] && grep -q 'unknown device "bogus"' <<<"$out"; then ok "CELER_DEVICE=bogus: $out"; else bad "CELER_DEVICE=bogus ($rc): $out"; fi

if [ ! -e /dev/nvidiactl ]; then
  # no GPU here: asking for one is an error that says why (the library, or the GPU)
  out=$("$C" generate --device cuda --tokens 1,2 -n 1 2>&1); rc=$?
  if [ $rc != 0 ] && grep -q "device cuda" <<<"$out"; then ok "--device cuda without a GPU: $out"
  else bad "--device cuda without a GPU ($rc): $out"; fi
  if [ -e "$(dirname "$C")/libceler-cuda.so" ]; then
    # the library loaded and its own message reached the program through the table of
    # host functions it was given (cuda_host_api: the program exports nothing)
    if [ $rc != 0 ] && grep -q "device cuda: no CUDA GPU" <<<"$out"; then ok "libceler-cuda.so reports through the host table"
    else bad "libceler-cuda.so's message did not reach the program ($rc): $out"; fi
  fi
fi
# --precision (issue 17): on every command that has --device; fast or exact; the CPU
# defaults to exact; a bf16 KV cache is refused on the CPU.
for cmd in generate logits bench serve run cache; do
  if "$C" $cmd --help 2>&1 | grep -q -- "--precision P .*fast or exact"; then ok "$cmd --help names --precision"
  else bad "$cmd --help lacks --precision"; fi
done
f=$("$C" generate --device cpu --precision fast --tokens 0,301,359 -n 5 2>/dev/null)
e=$("$C" generate --device cpu --precision=exact --tokens 0,301,359 -n 5 2>/dev/null)
# the CPU runs fast when asked (rounded activations, held by test_cpu_precision), exact by default
d=$("$C" generate --device cpu --tokens 0,301,359 -n 5 2>/dev/null)
if [ -n "$f" ] && [ -n "$e" ] && [ "$d" = "$e" ]; then ok "--precision fast and exact on the CPU, exact by default ($f / $e)"; else bad "--precision on the CPU: fast '$f', exact '$e', default '$d'"; fi
out=$("$C" generate --precision slow --tokens 1,2 -n 1 2>&1); rc=$?
if [ $rc = 2 ] && head -1 <<<"$out" | grep -q "error: flag '--precision' wants fast or exact, got 'slow'"; then ok "--precision slow: $(head -1 <<<"$out")"
else bad "--precision slow ($rc): $out"; fi
out=$("$C" generate --precision 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "flag '--precision' needs a value" <<<"$out"; then ok "--precision without a value"; else bad "--precision without a value ($rc): $out"; fi
out=$("$C" tokenize --precision fast 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "unknown flag '--precision'" <<<"$out"; then ok "tokenize has no --precision"; else bad "tokenize --precision ($rc): $out"; fi
out=$(CELER_PRECISION=slow "$C" generate --device cpu --tokens 1,2 -n 1 2>&1); rc=$?
if [ $rc != 0 ] && grep -q "CELER_PRECISION (or --precision) wants fast or exact, got 'slow'" <<<"$out"; then ok "CELER_PRECISION=slow: $out"
else bad "CELER_PRECISION=slow ($rc): $out"; fi
# a bf16 cache on the CPU: asked for, or chosen by --precision fast; inspect reports
# its bytes (half of f32's)
out=$(CELER_KV_DTYPE=bf16 "$C" generate --device cpu --tokens 0,301,359 -n 5 2>&1); rc=$?
if [ $rc = 0 ] && [[ "$out" =~ ^[0-9]+(,[0-9]+){4}$ ]]; then ok "CELER_KV_DTYPE=bf16 on the CPU: $out"
else bad "CELER_KV_DTYPE=bf16 on the CPU ($rc): $out"; fi
f32kv=$("$C" inspect | grep '^kv per token:' | awk '{print $4}')
for how in "CELER_KV_DTYPE=bf16" "CELER_PRECISION=fast"; do
  bfkv=$(env $how "$C" inspect | grep '^kv per token:' | awk '{print $4}')
  if [ -n "$f32kv" ] && [ "$bfkv" = $((f32kv / 2)) ]; then ok "inspect under $how: $bfkv kv bytes a token (f32: $f32kv)"
  else bad "inspect under $how: '$bfkv' kv bytes a token (f32: '$f32kv')"; fi
done
if CELER_PRECISION=exact "$C" inspect | grep -q "^kv as bf16: .* the cache type of fast precision"; then ok "inspect names the bf16 alternative"
else bad "inspect under exact: no 'kv as bf16' line"; fi
out=$(CELER_KV_DTYPE=f8 "$C" generate --device cpu --tokens 1,2 -n 1 2>&1); rc=$?
if [ $rc != 0 ] && grep -q "CELER_KV_DTYPE wants auto, f32 or bf16, got 'f8'" <<<"$out"; then ok "CELER_KV_DTYPE=f8: $out"
else bad "CELER_KV_DTYPE=f8 ($rc): $out"; fi
out=$(CELER_KV_DTYPE=f32 "$C" generate --device cpu --tokens 0,301,359 -n 5 2>/dev/null)
if [ "$out" = "$e" ]; then ok "CELER_KV_DTYPE=f32 on the CPU"; else bad "CELER_KV_DTYPE=f32 on the CPU: '$out' vs '$e'"; fi
finish
