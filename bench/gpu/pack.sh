#!/usr/bin/env bash
# bench/gpu/pack.sh OUT.tar.xz BUILD_DIR...: packs what a GPU run needs from builds
# made here (celer, libceler-cuda.so, the GPU-relevant test binaries) plus the shared
# libraries the GPU machine lacks (jansson, pcre2, utf8proc, libmicrohttpd, libedit and
# what they pull in), so the run's command only unpacks and sets LD_LIBRARY_PATH=lib.
set -eu
out=$1; shift
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for b in "$@"; do
  mkdir -p "$tmp/$b/tests/cuda"
  cp "$b/celer" "$b/libceler-cuda.so" "$tmp/$b/"
  for t in test_fixtures_models test_snapshot_fixtures; do [ -x "$b/tests/$t" ] && cp "$b/tests/$t" "$tmp/$b/tests/"; done
  for t in "$b"/tests/cuda/test_cuda_*; do [ -x "$t" ] && cp "$t" "$tmp/$b/tests/cuda/"; done
  ldd "$b/celer" "$b"/tests/cuda/test_cuda_* 2>/dev/null | awk '/=> \//{print $3}' | sort -u >> "$tmp/libs"
done
mkdir -p "$tmp/lib"
grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' "$tmp/libs" | grep -v cuda | sort -u |
  while read -r l; do cp -L "$l" "$tmp/lib/"; done
tar -C "$tmp" -cJf "$out" .
ls -la "$out"
