#!/usr/bin/env bash
# scripts/deps.sh: installs the Debian packages celer builds and tests with.
# Installs only what is missing; needs root (or sudo) to install anything.
set -eu
pkgs="build-essential clang pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libedit-dev xz-utils libclang-rt-dev libcurl4-openssl-dev git xxd chromium"
# git: tests/cli_hub.sh checks blob names with git hash-object; xxd: the Makefile builds the
# server's chat page into the binary; chromium: tests/cli_page.sh drives the page headless
# node + npm run the server's end-to-end tests (the openai npm client); Debian's when absent
command -v npm >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing:$missing" >&2
if [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq $missing >/dev/null
elif command -v sudo >/dev/null 2>&1; then
  sudo apt-get update -qq && sudo apt-get install -y -qq $missing >/dev/null
else
  echo "deps: missing Debian packages:$missing" >&2
  echo "deps: run as root: apt-get install$missing" >&2
  exit 1
fi
