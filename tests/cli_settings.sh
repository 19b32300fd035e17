#!/usr/bin/env bash
# tests/cli_settings.sh: the settings table (src/base/settings.h) is the only reader
# of the environment; `celer --help-env` prints it; bad values warn and fall back.
. "$(dirname "$0")/lib.sh"
out=$("$C" --help-env 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '^  CELER_DEVICE ' <<<"$out" && grep -q 'CELER_KV_INPLACE_WRITE' <<<"$out"; then ok "--help-env lists the table"
else bad "--help-env (exit $rc): $out"; fi
out=$(CELER_STATS=1 "$C" --help-env 2>&1)
if grep -q 'CELER_STATS .*\[set: 1\]' <<<"$out"; then ok "--help-env shows a set value"; else bad "--help-env set value: $out"; fi
out=$(LLAMA_API_KEY=secret "$C" --help-env 2>&1)
if grep -q 'LLAMA_API_KEY.*\[set: \*\*\*\]' <<<"$out" && ! grep -q secret <<<"$out"; then ok "--help-env hides keys"
else bad "--help-env shows a key: $out"; fi
out=$(CELER_KV_INPLACE_WRITE=maybe "$C" generate --tokens 1,2 -n 2 2>&1); rc=$?
if [ $rc = 0 ] && grep -q 'CELER_KV_INPLACE_WRITE=maybe is not 0 or 1' <<<"$out"; then ok "bad flag value warns"
else bad "bad flag value (exit $rc): $out"; fi
# every variable is read through the table: no getenv outside src/base/
hits=$(grep -rn 'getenv' src/ | grep -v '^src/base/')
if [ -z "$hits" ]; then ok "no getenv outside src/base"; else bad "getenv outside src/base: $hits"; fi
# every setting is documented
missing=""
for name in $(grep -o '^ *X([A-Z_0-9]*' src/base/settings.h | sed 's/.*X(//'); do
  case $name in LLAMA_*) continue ;; esac
  grep -q "\`$name\`" docs/settings.md || missing="$missing $name"
done
if [ -z "$missing" ]; then ok "docs/settings.md names every setting"; else bad "docs/settings.md lacks:$missing"; fi
finish
