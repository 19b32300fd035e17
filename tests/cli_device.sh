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
finish
