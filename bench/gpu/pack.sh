#!/usr/bin/env bash
# bench/gpu/pack.sh OUT.tar.xz BUILD_DIR...: packs what a GPU run needs from builds
# made here (celer, libceler-cuda.so, the GPU-relevant test binaries) plus the shared
# libraries the GPU machine lacks (jansson, pcre2, utf8proc, libmicrohttpd, libedit and
# what they pull in), so the run's command only unpacks and sets LD_LIBRARY_PATH=lib.
# The first build brings its tests (not with NO_TESTS=1); the others (A/B baselines) only celer and the
# library. Debug info is stripped: the working tree and the carry share 64 MiB, and the
# tracked tree is ~55 MiB, so build what you pack with `make CUDA_PTX=0` (no PTX: ~5.6 MB
# of xz with the tests, against ~10 MB with it).
# libcurl (only `celer pull` uses it, never on the GPU machine) is replaced by a stand-in
# whose calls fail, which leaves out curl's TLS and Kerberos libraries (~3 MB of xz).
set -eu
out=$1; shift
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
first=$1
for b in "$@"; do
  mkdir -p "$tmp/$b/tests/cuda"
  cp "$b/celer" "$b/libceler-cuda.so" "$tmp/$b/"
  ldd "$b/celer" >> "$tmp/ldd"
  [ "$b" = "$first" ] && for t in "$b"/bench_cuda_*; do [ -x "$t" ] && cp "$t" "$tmp/$b/"; done
  [ "$b" = "$first" ] && [ "${NO_TESTS:-0}" != 1 ] || continue
  for t in test_fixtures_models test_snapshot_fixtures test_tp; do [ -x "$b/tests/$t" ] && cp "$b/tests/$t" "$tmp/$b/tests/"; done
  for t in "$b"/tests/cuda/test_cuda_*; do [ -x "$t" ] && cp "$t" "$tmp/$b/tests/cuda/" && ldd "$t" >> "$tmp/ldd"; done
done
awk '/=> \//{print $3}' "$tmp/ldd" | sort -u > "$tmp/libs"
# the libraries only curl needs: what celer links without libcurl's own dependencies
curl=$(grep '/libcurl\.so' "$tmp/libs" || true)
if [ -n "$curl" ]; then
  ldd "$curl" | awk '/=> \//{print $3}' | sort -u > "$tmp/curl-deps"
  for n in $(objdump -p "$first/celer" | awk '$1 == "NEEDED" && $2 !~ /^libcurl/ { print $2 }'); do
    p=$(grep "/$n\$" "$tmp/libs" || true)
    [ -n "$p" ] && { echo "$p"; ldd "$p" | awk '/=> \//{print $3}'; }
  done | sort -u > "$tmp/other-deps"
  grep -vxFf "$tmp/other-deps" "$tmp/curl-deps" > "$tmp/curl-only" || true
  grep -vxFf "$tmp/curl-only" "$tmp/libs" | grep -v '/libcurl\.so' > "$tmp/libs2" || true
  mv "$tmp/libs2" "$tmp/libs"
  mkdir -p "$tmp/lib"
  nm -D "$first/celer" | awk '$1 == "U" && $2 ~ /^curl_/ { sub(/@.*/, "", $2); print $2 }' | sort -u |
    awk 'BEGIN { print "#include <stdio.h>\n#include <stdlib.h>" }
         $1 == "curl_global_init" { print "long " $1 "(long f) { (void)f; return 0; }"; next }
         { print "long " $1 "(void) { fputs(\"libcurl stand-in (bench/gpu/pack.sh): no downloads here\\n\", stderr); exit(1); }" }' > "$tmp/curl_stub.c"
  ver=$(objdump -T "$first/celer" | awk '/\*UND\*/ && / curl_/ { gsub(/[()]/, "", $(NF-1)); print $(NF-1); exit }')
  echo "${ver:-CURL_OPENSSL_4} { global: *; };" > "$tmp/curl.map"
  cc -shared -fPIC -w -Wl,-soname,libcurl.so.4 -Wl,--version-script="$tmp/curl.map" -o "$tmp/lib/libcurl.so.4" "$tmp/curl_stub.c"
fi
find "$tmp" -type f -perm -u+x -exec strip --strip-debug {} +
mkdir -p "$tmp/lib"
grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' "$tmp/libs" | grep -v cuda | sort -u |
  while read -r l; do cp -L "$l" "$tmp/lib/"; done
find "$tmp/lib" -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
tar -C "$tmp" -cf - . | xz -9e -T2 > "$out"
ls -la "$out"
