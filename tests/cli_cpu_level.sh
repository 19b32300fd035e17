#!/usr/bin/env bash
# tests/cli_cpu_level.sh: CELER_CPU from the command line: `celer bench` names the
# CPU kernel level in use (table and json), a forced level is the one used, and an
# unknown level or one this processor lacks exits 1 naming CELER_CPU.
. "$(dirname "$0")/lib.sh"
"$C" synth --shape tiny -o "$T/tiny" >/dev/null 2>&1 || bad "synth tiny"
out=$("$C" bench -m "$T/tiny" -p 16 -n 4 -r 1 -t 1 2>/dev/null)
best=$(sed -n 's/^CPU kernels: \([a-z0-9]*\).*/\1/p' <<<"$out")
if [ -n "$best" ]; then ok "bench prints the level ($best)"; else bad "bench md has no 'CPU kernels:' line: $out"; fi
out=$("$C" bench -m "$T/tiny" -p 16 -n 0 -r 1 -t 1 -o json 2>/dev/null)
if grep -q "\"cpu_kernels\": \"$best" <<<"$out"; then ok "bench json names the level"; else bad "bench json: $out"; fi
case $best in avx512) have="generic avx2 avx512" ;; avx2) have="generic avx2" ;; *) have="generic" ;; esac
for l in generic avx2 avx512; do
  if [[ " $have " == *" $l "* ]]; then
    out=$(CELER_CPU=$l "$C" bench -m "$T/tiny" -p 16 -n 4 -r 1 -t 1 2>&1); rc=$?
    if [ $rc = 0 ] && grep -q "^CPU kernels: $l\b" <<<"$out"; then ok "CELER_CPU=$l is used"
    else bad "CELER_CPU=$l (exit $rc): $out"; fi
  else
    out=$(CELER_CPU=$l "$C" bench -m "$T/tiny" -p 16 -n 4 -r 1 -t 1 2>&1); rc=$?
    if [ $rc = 1 ] && grep -q "CELER_CPU=$l: this processor (or its OS) lacks" <<<"$out"; then ok "CELER_CPU=$l refused on this $best CPU"
    else bad "CELER_CPU=$l on a $best CPU (exit $rc): $out"; fi
  fi
done
out=$(CELER_CPU=sse9 "$C" generate -m "$T/tiny" --tokens 1,2 -n 2 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "CELER_CPU=sse9: not a CPU kernel level" <<<"$out"; then ok "unknown level refused"
else bad "CELER_CPU=sse9 (exit $rc): $out"; fi
out=$(CELER_CPU_Q4DEC=int8 "$C" generate -m "$T/tiny" --tokens 1,2 -n 2 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "CELER_CPU_Q4DEC=int8: not a 4-bit decode kernel (auto, bf16 or int16)" <<<"$out"; then ok "unknown 4-bit decode kernel refused"
else bad "CELER_CPU_Q4DEC=int8 (exit $rc): $out"; fi
echo "@@ $pass passed $fail failed"
[ $fail = 0 ]
