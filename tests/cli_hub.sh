#!/usr/bin/env bash
# tests/cli_hub.sh: hub names and `celer pull` (docs/hub.md), nothing outside the machine.
#  1. -m ORG/NAME[@REV] over a Hugging Face cache tree this script builds the way
#     huggingface_hub lays it out (refs, snapshots of relative links into blobs/, a
#     sharded checkpoint), with generation checked against transformers' tokens.
#  2. celer pull from tests/hub/hubserver.mjs, a local server in the hub's URL layout:
#     a full download (blob names checked with sha256sum and git hash-object), then a
#     generate from the cache; a resume after dropped connections; a corrupt file; 401
#     (gated); 404.
. "$(dirname "$0")/lib.sh"
C=$(cd "$(dirname "$C")" && pwd)/$(basename "$C")
ROOT=$(pwd)
M=tests/fixtures/models
# transformers' greedy continuations of the fixtures (40 prompt tokens, 40 generated)
ref() { node tests/hub/refseq.mjs "$M/$1/ref.safetensors" seq_a "$2" "$3"; }
LP=$(ref llama 0 40); LW=$(ref llama 40 80)
QP=$(ref qwen3 0 40); QW=$(ref qwen3 40 80)
gen() { "$C" generate --tokens "$2" -n 40 -m "$1" 2>&1; }

# the llama fixture as transformers shards it: two files and an index
mkdir -p "$T/split"
cp "$M/llama/config.json" "$M/llama/generation_config.json" "$T/split/"
node tests/hub/split.mjs "$M/llama/model.safetensors" "$T/split"

# ---- 1. lookup in a cache this script builds ------------------------------------
# add_snapshot CACHE REPO_DIRNAME COMMIT SRC_DIR: blobs named by content, links relative
add_snapshot() {
  local r="$1/$2" f h
  mkdir -p "$r/blobs" "$r/snapshots/$3" "$r/refs"
  for f in $(cd "$4" && ls); do
    h=$(sha256sum "$4/$f" | cut -c1-64)
    cp "$4/$f" "$r/blobs/$h"
    ln -s "../../blobs/$h" "$r/snapshots/$3/$f"
  done
}
C1=$T/cache1
c1=1111111111111111111111111111111111111111
c2=2222222222222222222222222222222222222222
add_snapshot "$C1" models--org--tiny "$c1" "$T/split"
add_snapshot "$C1" models--org--tiny "$c2" "$M/qwen3"
printf '%s' "$c1" > "$C1/models--org--tiny/refs/main"
printf '%s\n' "$c2" > "$C1/models--org--tiny/refs/v2"   # a trailing newline is tolerated
mkdir -p "$C1/models--org--tiny/refs/refs/pr"    # huggingface_hub keeps refs/REVISION, so refs/refs/pr/1
printf '%s' "$c2" > "$C1/models--org--tiny/refs/refs/pr/1"
H="env HF_HUB_CACHE=$C1"
out=$($H "$C" generate -m org/tiny --tokens "$LP" -n 40 2>&1)
if [ "$out" = "$LW" ]; then ok "org/tiny: refs/main -> a sharded snapshot of links, transformers' tokens"
else bad "org/tiny from the cache: '$out', want '$LW'"; fi
out=$($H "$C" generate -m org/tiny@v2 --tokens "$QP" -n 40 2>&1)
if [ "$out" = "$QW" ]; then ok "org/tiny@v2: a revision name"; else bad "org/tiny@v2: '$out', want '$QW'"; fi
out=$($H "$C" generate -m "org/tiny@$c2" --tokens "$QP" -n 40 2>&1)
if [ "$out" = "$QW" ]; then ok "org/tiny@COMMIT: the snapshot directly"; else bad "org/tiny@commit: '$out'"; fi
out=$($H "$C" generate -m "org/tiny@refs/pr/1" --tokens "$QP" -n 40 2>&1)
if [ "$out" = "$QW" ]; then ok "org/tiny@refs/pr/1"; else bad "org/tiny@refs/pr/1: '$out'"; fi
expect "inspect takes a hub name" 0 "llama" $H "$C" inspect -m org/tiny
out=$($H CELER_DEFAULT_MODEL=org/tiny "$C" generate --tokens "$LP" -n 40 2>&1)
if [ "$out" = "$LW" ]; then ok "CELER_DEFAULT_MODEL takes a hub name"; else bad "CELER_DEFAULT_MODEL=org/tiny: '$out'"; fi
# the cache's place: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
mkdir -p "$T/hfhome" "$T/xdg/huggingface" "$T/home/.cache/huggingface"
ln -s "$C1" "$T/hfhome/hub"; ln -s "$C1" "$T/xdg/huggingface/hub"; ln -s "$C1" "$T/home/.cache/huggingface/hub"
for v in "HF_HOME=$T/hfhome" "XDG_CACHE_HOME=$T/xdg" "HOME=$T/home"; do
  out=$(env -u HF_HUB_CACHE -u HF_HOME -u XDG_CACHE_HOME "$v" "$C" generate -m org/tiny --tokens "$LP" -n 40 2>&1)
  if [ "$out" = "$LW" ]; then ok "cache found through ${v%%=*}"; else bad "cache through ${v%%=*}: '$out'"; fi
done
expect "HF_HUB_CACHE wins over HF_HOME" 1 "$T/empty/models--org--tiny" \
  env HF_HOME="$T/hfhome" HF_HUB_CACHE="$T/empty" "$C" generate -m org/tiny --tokens 1
# what is missing, and where it looked
expect "a model not in the cache" 1 "org/none is not a local directory, and not in the Hugging Face cache (no $C1/models--org--none); download it with: celer pull org/none" \
  $H "$C" generate -m org/none --tokens 1
expect "a revision not in the cache" 1 "revision 'v9' is not in the Hugging Face cache (no $C1/models--org--tiny/refs/v9).*celer pull org/tiny@v9" \
  $H "$C" generate -m org/tiny@v9 --tokens 1
expect "a commit not in the cache" 1 "snapshot 3333333333333333333333333333333333333333 is not in the Hugging Face cache" \
  $H "$C" generate -m org/tiny@3333333333333333333333333333333333333333 --tokens 1
printf 'not-a-commit' > "$C1/models--org--tiny/refs/bad"
expect "a ref that holds no commit" 1 "refs/bad does not hold a commit hash" $H "$C" generate -m org/tiny@bad --tokens 1
# not cached is no usage error (exit 1, as for run), on every -m command and for the default model
for cmd in "inspect -m org/none" "serve -m org/none --port 0" "logits -m org/none --tokens 1 -o $T/x.st" "bench -m org/none" \
           "cache -m org/none --tokens 1" "tokenize -m org/none --text hi"; do
  expect "$cmd: not cached" 1 "download it with: celer pull org/none" $H "$C" $cmd
done
expect "CELER_DEFAULT_MODEL not cached" 1 "download it with: celer pull org/none" \
  $H CELER_DEFAULT_MODEL=org/none "$C" generate --tokens 1
for cmd in generate logits serve bench inspect cache run tokenize; do
  expect "$cmd --help names hub names" 0 "DIR|ORG/NAME" "$C" $cmd --help
done
expect "run: not cached, not a terminal: the command to run" 1 "download it with: celer pull org/none" \
  $H "$C" run org/none -p hi </dev/null
# an existing local directory wins over a hub name of the same spelling
mkdir -p "$T/work/org/tiny"
echo '{' > "$T/work/org/tiny/config.json"
out=$(cd "$T/work" && $H "$C" generate -m org/tiny --tokens 1 2>&1); rc=$?
if [ $rc != 0 ] && grep -q "org/tiny/config.json" <<<"$out"; then ok "a local directory wins over the hub name"
else bad "local directory vs hub name (exit $rc): $out"; fi
# the tokenizer commands take hub names too (Hugging Face's ids for the text)
mkdir -p "$T/tok"
cp tests/fixtures/tokenizers/qwen3/tokenizer.json "$T/tok/"
add_snapshot "$C1" models--org--tok "$c1" "$T/tok"
printf '%s' "$c1" > "$C1/models--org--tok/refs/main"
out=$(echo '"Hello, world!"' | $H "$C" tokenize -m org/tok 2>&1 | tr -d ' ')
if [ "$out" = "[9707,11,1879,0]" ]; then ok "tokenize -m ORG/NAME"; else bad "tokenize -m org/tok: '$out'"; fi

# ---- 2. celer pull from a local stand-in for the hub ------------------------------
R=$T/repos
mkdir -p "$R/test-org/tiny-llama/original" "$R/gated/tiny-llama"
cp "$T/split/"* "$R/test-org/tiny-llama/"
echo "# a model card" > "$R/test-org/tiny-llama/README.md"          # not needed to run: not fetched
head -c 4096 /dev/urandom > "$R/test-org/tiny-llama/consolidated.safetensors"  # not in the index: not fetched
echo '{"dim": 64}' > "$R/test-org/tiny-llama/original/params.json"  # only with --include
cp "$T/split/"* "$R/gated/tiny-llama/"
mkdir -p "$R/noblobs/tiny-llama" && cp "$T/split/"* "$R/noblobs/tiny-llama/"
echo '{}' > "$T/faults"
: > "$T/log"
node tests/hub/hubserver.mjs "$R" "$T/faults" "$T/log" > "$T/port" &
srv=$!; PIDS="$PIDS $srv"
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; sleep 0.1; done
PORT=$(cat "$T/port")
if [ -z "$PORT" ]; then bad "the test hub server did not start"; finish; fi
P="env HF_ENDPOINT=http://127.0.0.1:$PORT HF_HUB_CACHE=$T/pc"
RD=$T/pc/models--test-org--tiny-llama
commit=$(printf '%s' test-org/tiny-llama | sha1sum | cut -c1-40)   # the server's commit

out=$($P "$C" pull test-org/tiny-llama 2>"$T/err"); rc=$?
if [ $rc = 0 ] && [ "$out" = "$RD/snapshots/$commit" ] && [ ! -s "$T/err" ]; then ok "pull: prints the snapshot, quiet in a pipe"
else bad "pull (exit $rc): '$out' $(cat "$T/err")"; fi
if [ "$(cat "$RD/refs/main" 2>/dev/null)" = "$commit" ]; then ok "pull: refs/main holds the commit"; else bad "refs/main: $(cat "$RD/refs/main" 2>&1)"; fi
layout=ok
for f in config.json generation_config.json model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  l="$RD/snapshots/$commit/$f"
  case $f in *.safetensors) want=$(sha256sum "$R/test-org/tiny-llama/$f" | cut -c1-64) ;;
             *) want=$(git hash-object "$R/test-org/tiny-llama/$f") ;; esac
  [ -L "$l" ] && [ "$(readlink "$l")" = "../../blobs/$want" ] && cmp -s "$l" "$R/test-org/tiny-llama/$f" || layout="$f: $(readlink "$l")"
done
if [ "$layout" = ok ]; then ok "pull: snapshots/COMMIT/FILE -> ../../blobs/ETAG (sha256 for LFS, git blob id otherwise)"
else bad "pull layout: $layout"; fi
extra=$(ls "$RD/snapshots/$commit" | grep -E 'README|consolidated|original')
if [ -z "$extra" ] && ! grep -q "consolidated\|README" "$T/log"; then ok "pull: only what a run needs (index shards, no card)"
else bad "pull fetched more than needed: $extra"; fi
if [ -z "$(find "$T/pc" -name '*.incomplete')" ]; then ok "pull: no .incomplete left"; else bad "pull left .incomplete files"; fi
out=$($P "$C" generate -m test-org/tiny-llama --tokens "$LP" -n 40 2>&1)
if [ "$out" = "$LW" ]; then ok "generate -m ORG/NAME after pull: transformers' tokens"; else bad "generate after pull: '$out'"; fi
: > "$T/log"
expect "pull again: everything cached" 0 "$commit" $P "$C" pull test-org/tiny-llama
if ! grep -q resolve "$T/log"; then ok "pull again downloads nothing"; else bad "pull again downloaded: $(cat "$T/log")"; fi
expect "pull @v1 --include" 0 "$commit" $P "$C" pull test-org/tiny-llama@v1 --include 'original/*' --include README.md
if [ "$(readlink "$RD/snapshots/$commit/original/params.json")" = "../../../blobs/$(git hash-object "$R/test-org/tiny-llama/original/params.json")" ] &&
   [ -L "$RD/snapshots/$commit/README.md" ] && [ "$(cat "$RD/refs/v1")" = "$commit" ]; then ok "pull --include: a nested file links ../../../blobs; refs/v1"
else bad "pull --include: $(ls -lR "$RD/snapshots")"; fi

# a file list without blob ids or sizes: each file's ETag and size from a HEAD
: > "$T/log"
expect "pull: names only in the file list (HEAD per file)" 0 "snapshots/" $P "$C" pull noblobs/tiny-llama
l="$T/pc/models--noblobs--tiny-llama/snapshots/$(printf '%s' noblobs/tiny-llama | sha1sum | cut -c1-40)"
if [ "$(readlink "$l/model-00001-of-00002.safetensors")" = "../../blobs/$(sha256sum "$T/split/model-00001-of-00002.safetensors" | cut -c1-64)" ] &&
   [ "$(readlink "$l/config.json")" = "../../blobs/$(git hash-object "$T/split/config.json")" ] && grep -q "^HEAD " "$T/log"; then
  ok "HEAD gives the blob names (X-Linked-Etag for LFS, ETag otherwise)"
else bad "names-only pull: $(ls -l "$l" 2>&1) $(cat "$T/log")"; fi
# a dropped connection: resumed with Range from where it stopped
P2="env HF_ENDPOINT=http://127.0.0.1:$PORT HF_HUB_CACHE=$T/pc2"
echo '{"drop": {"model-00002-of-00002.safetensors": 2}}' > "$T/faults"
: > "$T/log"
expect "pull resumes after the connection drops" 0 "$commit" $P2 "$C" pull test-org/tiny-llama
if grep -qE '^GET /cdn/[0-9a-f]+ bytes=[1-9][0-9]*-$' "$T/log"; then ok "the resume asks for the rest (Range: bytes=N-)"
else bad "no Range request after a drop: $(cat "$T/log")"; fi
out=$($P2 "$C" generate -m test-org/tiny-llama --tokens "$LP" -n 40 2>&1)
if [ "$out" = "$LW" ]; then ok "generate after a resumed pull: transformers' tokens"; else bad "generate after resume: '$out'"; fi
# a connection that keeps dropping: an error, the partial file kept, no snapshot; the next run resumes
echo '{"drop": {"model-00001-of-00002.safetensors": 100}}' > "$T/faults"
expect "pull: a connection that keeps dropping" 1 "run the same command again to resume" \
  env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc3" "$C" pull test-org/tiny-llama
part=$(find "$T/pc3" -name '*.incomplete')
if [ -n "$part" ] && [ "$(stat -c %s "$part")" -gt 0 ] && [ ! -e "$T/pc3/models--test-org--tiny-llama/snapshots" ]; then
  ok "after it: the partial blob kept, nothing under snapshots/"
else bad "after a failed pull: partial '$part', $(ls -R "$T/pc3" | head -30)"; fi
echo '{}' > "$T/faults"
: > "$T/log"
expect "the next pull resumes and finishes" 0 "$commit" env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc3" "$C" pull test-org/tiny-llama
if grep -qE '^GET /cdn/[0-9a-f]+ bytes=[1-9][0-9]*-$' "$T/log"; then ok "the next pull starts from the partial file"
else bad "the next pull did not resume: $(cat "$T/log")"; fi
# a write that fails (a file-size limit standing in for a full disk; SIGXFSZ ignored so
# that write() reports EFBIG): the error names the file, nothing under snapshots/
out=$(trap '' XFSZ; ulimit -f 300; env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc7" "$C" pull test-org/tiny-llama 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "writing $T/pc7/models--test-org--tiny-llama/blobs/[0-9a-f]*.incomplete: File too large" <<<"$out" &&
   [ ! -e "$T/pc7/models--test-org--tiny-llama/snapshots" ]; then ok "pull: a failed write (disk full) is an error naming the file"
else bad "pull with a failing write (exit $rc): $out"; fi
# a corrupt file: SHA-256 mismatch, nothing under snapshots/, no partial file kept
echo '{"corrupt": ["model-00002-of-00002.safetensors"]}' > "$T/faults"
expect "pull: a corrupt file" 1 "model-00002-of-00002.safetensors is corrupt: its SHA-256 is" \
  env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc4" "$C" pull test-org/tiny-llama
if [ ! -e "$T/pc4/models--test-org--tiny-llama/snapshots" ] && [ -z "$(find "$T/pc4" -name '*.incomplete')" ] &&
   [ ! -e "$T/pc4/models--test-org--tiny-llama/refs" ]; then ok "after it: no snapshot, no ref, no partial file"
else bad "after a corrupt file: $(ls -R "$T/pc4")"; fi
expect "and -m finds no model" 1 "not in the Hugging Face cache" env HF_HUB_CACHE="$T/pc4" "$C" generate -m test-org/tiny-llama --tokens 1
echo '{}' > "$T/faults"
# gated: 401 without the token, the download with it
expect "pull: gated (401)" 1 "the model is gated: accept its licence on http://127.0.0.1:$PORT/gated/tiny-llama.*set HF_TOKEN.*HF_TOKEN is not set" \
  env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc5" "$C" pull gated/tiny-llama
expect "pull: gated, wrong token" 1 "HF_TOKEN was sent and not accepted" \
  env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc5" HF_TOKEN=wrong "$C" pull gated/tiny-llama
expect "pull: gated, with HF_TOKEN" 0 "snapshots/" \
  env HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HUB_CACHE="$T/pc5" HF_TOKEN=secret "$C" pull gated/tiny-llama
# 404s
expect "pull: no such model (404)" 1 "no such model test-org/nope on http://127.0.0.1:$PORT (HTTP 404" $P "$C" pull test-org/nope
expect "pull: no such revision (404)" 1 "no revision 'nobranch' of test-org/tiny-llama" $P "$C" pull test-org/tiny-llama@nobranch
expect "pull: nothing listening" 1 "cannot download the file list from http://127.0.0.1:1" \
  env HF_ENDPOINT=http://127.0.0.1:1 HF_HUB_CACHE="$T/pc6" "$C" pull test-org/tiny-llama
expect "pull: not a hub name" 2 "is not a hub model name" "$C" pull ./some/dir
expect "pull: no name" 2 "missing the model" "$C" pull
out=$(HF_TOKEN=hf_secret_value "$C" --help-env 2>&1)
if grep -q 'HF_TOKEN.*\[set: \*\*\*\]' <<<"$out" && ! grep -q hf_secret_value <<<"$out"; then ok "--help-env hides HF_TOKEN"
else bad "--help-env shows HF_TOKEN: $out"; fi
expect "pull --help" 0 "usage: celer pull ORG/NAME" "$C" pull --help
finish
