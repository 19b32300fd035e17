#!/usr/bin/env bash
# tests/cli_page.sh: `celer --version`, and the chat page of `celer serve` (GET /) in a
# real browser: headless Chromium (Debian's chromium, which scripts/deps.sh installs)
# driven over the DevTools protocol by tests/server/page.mjs against servers on
# 127.0.0.1 (--port 0, the port read back from the log) with models/default, without
# and with --api-key. Screenshots: BUILD/page/page.png and page-key.png. Every wait is
# bounded.
. "$(dirname "$0")/lib.sh"
B=$(dirname "$C")

# ---- --version: the VERSION file and the commit the binary was built from ----
want_v=$(tr -d '[:space:]' <VERSION)
want_c=$(git describe --always --dirty 2>/dev/null || echo unknown)
for args in "--version" "serve --version"; do
  out=$("$C" $args 2>&1); rc=$?
  # the tree may have changed since the build: compare the commit, not the -dirty mark
  if [ "$rc" = 0 ] && [[ "$out" =~ ^celer\ ([^ ]+)\ \(git\ ([^ ]+)\)$ ]] && [ "${BASH_REMATCH[1]}" = "$want_v" ] &&
     [ "${BASH_REMATCH[2]%-dirty}" = "${want_c%-dirty}" ]; then ok "celer $args: $out"
  else bad "celer $args ($rc): '$out', want 'celer $want_v (git $want_c)' (a commit since the build? rebuild)"; fi
done

# ---- the page in Chromium ----
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ] || ! command -v node >/dev/null; then
  bad "the page test needs Debian's chromium ($CHROMIUM) and node: run scripts/deps.sh (make test runs it)"; finish
fi
export CHROMIUM
OUT="$B/page"
mkdir -p "$OUT"
rm -f "$OUT"/*.png

get() { timeout 60 node tests/server/get.mjs "$@"; }
node_case() { node_script 400 tests/server/page.mjs "$@"; }

if start page -m models/default -c 1024 -np 2; then
  r=$(BODY=x get "http://127.0.0.1:$PORT/")
  [ "$(head -1 <<<"$r")" = 405 ] && ok "POST /: 405" || bad "POST /: $r"
  node_case chat "$PORT" "$OUT"
  stop "$PID" && ok "page server: clean exit" || bad "page server exit: $(tail -3 "$T/page.log")"
fi
KEY=page-key-$$
if start key -m models/default --api-key "$KEY" -np 1; then
  r=$(get "http://127.0.0.1:$PORT/")
  [ "$(head -1 <<<"$r")" = 200 ] && grep -q '<title>celer chat</title>' <<<"$r" && ok "GET / needs no key" || bad "GET / with --api-key: $(head -3 <<<"$r")"
  node_case key "$PORT" "$OUT" "$KEY"
  stop "$PID" || bad "key server exit"
fi
for f in page.png page-key.png; do
  [ -s "$OUT/$f" ] && ok "screenshot $OUT/$f" || bad "no screenshot $OUT/$f"
done
finish
