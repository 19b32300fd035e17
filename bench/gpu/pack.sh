#!/usr/bin/env bash
# bench/gpu/pack.sh OUT.tar.xz BUILD_DIR...: packs what a GPU run needs from builds
# made here (celer, libceler-cuda.so, the GPU-relevant test binaries) plus the shared
# libraries the GPU machine lacks (jansson, pcre2, utf8proc, libmicrohttpd, libedit and
# what they pull in), so the run's command only unpacks and sets LD_LIBRARY_PATH=lib.
# The first build brings its tests (not with NO_TESTS=1); the others (A/B baselines) only celer and the
# library. Debug info is stripped: the working tree and the carry share 64 MiB.
set -eu
out=$1; shift
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
first=$1
for b in "$@"; do
  mkdir -p "$tmp/$b/tests/cuda"
  cp "$b/celer" "$b/libceler-cuda.so" "$tmp/$b/"
  ldd "$b/celer" >> "$tmp/ldd"
  [ "$b" = "$first" ] && [ "${NO_TESTS:-0}" != 1 ] || continue
  for t in test_fixtures_models test_snapshot_fixtures test_tp; do [ -x "$b/tests/$t" ] && cp "$b/tests/$t" "$tmp/$b/tests/"; done
  for t in "$b"/tests/cuda/test_cuda_*; do [ -x "$t" ] && cp "$t" "$tmp/$b/tests/cuda/" && ldd "$t" >> "$tmp/ldd"; done
done
awk '/=> \//{print $3}' "$tmp/ldd" | sort -u > "$tmp/libs"
find "$tmp" -type f -perm -u+x -exec strip --strip-debug {} +
mkdir -p "$tmp/lib"
grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' "$tmp/libs" | grep -v cuda | sort -u |
  while read -r l; do cp -L "$l" "$tmp/lib/"; done
find "$tmp/lib" -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
tar -C "$tmp" -cf - . | xz -9e -T2 > "$out"
ls -la "$out"
