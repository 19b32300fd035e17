#!/usr/bin/env bash
# fuzz/run.sh [SECONDS] [HARNESS...]: builds the libFuzzer harnesses (clang,
# -fsanitize=fuzzer,address,undefined) into build-fuzz/, then runs each for SECONDS
# (default 60) on a corpus seeded from fuzz/seeds/<harness>/, with fuzz/<harness>.dict
# as its dictionary where there is one. Fails on any crash,
# leak, timeout or sanitizer report; the input that caused it is left in
# build-fuzz/artifacts/ and should be added to fuzz/regress/<harness>/.
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
names=${*:-$(cd fuzz && ls fuzz_*.c | sed 's/\.c$//')}
make -s tests >/dev/null || exit 1   # unpacks the fixture tokenizers the harnesses read
B=build-fuzz
FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
make -s BUILD=$B CC=clang OPT=-O1 EXTRA_CFLAGS="$FLAGS" $B/libceler.a || exit 1
mkdir -p $B/fuzz $B/artifacts
status=0
for n in $names; do
  clang -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -o $B/fuzz/$n fuzz/$n.c $B/libceler.a -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd -lm -pthread || { status=1; continue; }
  mkdir -p $B/corpus/$n
  seeds=fuzz/seeds/$n; [ -d "$seeds" ] || seeds=
  regress=fuzz/regress/$n; [ -d "$regress" ] || regress=
  dict=; [ -f fuzz/$n.dict ] && dict=-dict=fuzz/$n.dict   # tokens of the format (fuzz/fuzz_jinja.dict)
  # the live-server harness is multi-threaded: libFuzzer's per-input leak re-run would
  # count the server threads' allocations as the input's; the server's leaks are
  # checked by LeakSanitizer at the exit of every server in `make test SAN=1`
  leaks=; [ "$n" = fuzz_server_request ] && leaks=-detect_leaks=0
  echo "== $n: ${secs}s"
  if ! $B/fuzz/$n $dict $leaks -max_total_time="$secs" -timeout=10 -rss_limit_mb=2560 -max_len=65536 \
       -artifact_prefix=$B/artifacts/$n- -print_final_stats=1 $B/corpus/$n $seeds $regress > $B/fuzz/$n.log 2>&1; then
    echo "FAIL $n (see $B/fuzz/$n.log and $B/artifacts/)"; tail -n 30 $B/fuzz/$n.log; status=1
  else
    grep -E "stat::number_of_executed_units|cov:" $B/fuzz/$n.log | tail -n 2
  fi
done
exit $status
