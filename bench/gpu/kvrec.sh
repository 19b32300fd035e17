#!/usr/bin/env bash
# bench/gpu/kvrec.sh NEW: the KV in-place write record (issue 16 item 6). Run on the
# GPU machine from the repository root after unpacking bench/gpu/pack.sh's archive into
# .gpu/ (NEW/ and lib/), as batched.sh. For each synthesized shape (SHAPES, default the
# five of the record: gemma3-4b gpt-oss-20b gemma4-e4b gemma4-12b exaone4-1.2b), with
# CELER_KV_INPLACE_WRITE=1 and =0 in turn:
#   - one sequence: `celer bench -p PP -n TG`, at depth 0 and at DEPTH (past the
#     model's sliding window, where a rotating cache's writes land on old rows);
#   - NPL sequences (default 32): `celer bench -npl NPL -p PP,DEPTH -n TG` (-npl has no
#     depth: a DEPTH-token prompt fills the window instead);
#   - output: `celer generate --temp 0` over a DEPTH-token prompt, GEN tokens, and the
#     same with a seeded draw at temperature 1 (random weights often make greedy repeat
#     one token; the draw follows every logit); the two settings must print the same
#     tokens (the script fails otherwise).
# One log per shape: $OUT/kvrec-SHAPE.md. A checkpoint the script synthesized is removed
# after its shape (five bf16 shapes do not fit the disk together; KEEP=1 keeps them in
# /tmp/synth-*; one already there is used and kept).
#
# SYNTH=1: no checkpoint on disk; every command takes `--synth SHAPE` (the GPU fills
# the weights), so a large shape (gpt-oss-20b, gemma4-12b) costs seconds, not a
# 40 GB write and ten reads of it.
# Settings (environment): SHAPES, PP (512), TG (128), NPL (32), GEN (64), REPS (3),
# DEPTH (every shape's; default per shape below), Q4=1 (synth --q4), DEVICE (cuda),
# CELER_BIN (the celer to run; default .gpu/NEW/celer), BENCH_TIMEOUT (600 s a call),
# ONE_ARMS and NPL_ARMS (default "1 0": the CELER_KV_INPLACE_WRITE values whose
# one-sequence and -npl benches run; a missing row of an earlier call alone, e.g.
# ONE_ARMS= NPL_ARMS=0; the outputs of both arms are always compared).
# On the CPU, to check the script itself:
#   CELER_BIN=build/celer DEVICE=cpu SHAPES=tiny PP=32 TG=8 NPL=4 GEN=8 DEPTH=96 OUT=/tmp/kv \
#     bench/gpu/kvrec.sh -
set -u
[ $# = 1 ] || { echo "usage: bench/gpu/kvrec.sh NEW (a build unpacked in .gpu/, or - with CELER_BIN)" >&2; exit 2; }
BIN=${CELER_BIN:-.gpu/$1/celer}
[ -x "$BIN" ] || { echo "kvrec: $BIN is not an executable celer" >&2; exit 2; }
# only the settings named below: nothing inherited from the machine's environment
for v in $(env | grep -oE '^(CELER|CUK)_[A-Z0-9_]+'); do [ "$v" = CELER_CUDA_LIB ] || [ "$v" = CELER_BIN ] || unset "$v"; done
[ -d .gpu/lib ] && export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CELER_CUDA_LIB= OUT=${OUT:-/tmp/out}
SHAPES=${SHAPES:-gemma3-4b gpt-oss-20b gemma4-e4b gemma4-12b exaone4-1.2b}
PP=${PP:-512} TG=${TG:-128} NPL=${NPL:-32} GEN=${GEN:-64} REPS=${REPS:-3} DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"

# A depth past the shape's sliding window (src/model/synth.c): twice the window, at
# least 2048 where the window is smaller than 1024. exaone4-1.2b has no window (global
# attention everywhere): its record is the control, where in place and copying are
# the same path.
depth_of() {
  case $1 in
    gemma3-4b) echo 2048 ;;    # window 1024
    gpt-oss-20b) echo 2048 ;;  # window 128 (every other layer)
    gemma4-e4b) echo 2048 ;;   # window 512
    gemma4-12b) echo 2048 ;;   # window 1024
    *) echo 2048 ;;
  esac
}

# n pseudo-random token ids below the shape's vocabulary (and below 30000: ordinary
# tokens, past the special ones at the bottom), comma separated; the same every run
prompt_ids() {
  awk -v n="$1" -v v="$2" 'BEGIN { x = 12345; hi = v < 30000 ? v : 30000;
    for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", 3 + x % (hi - 3) } }'
}

rc=0
for s in $SHAPES; do
  log=$OUT/kvrec-$s.md
  d=/tmp/synth-$s${Q4:+-q4}
  D=${DEPTH:-$(depth_of "$s")}
  : > "$log"
  made=0
  if [ "${SYNTH:-0}" = 1 ]; then
    M="--synth $s"
    case $s in tiny) V=256 ;; *) V=30000 ;; esac # the other shapes' vocabularies are over 100,000
  else
    M="-m $d"
    if [ ! -f "$d/model.safetensors" ]; then
      made=1
      "$BIN" synth --shape "$s" ${Q4:+--q4} -o "$d" > /dev/null 2>> "$log" || { echo "synth $s failed" | tee -a "$log"; rc=1; continue; }
    fi
    V=$(grep -oE '"vocab_size": *[0-9]+' "$d/config.json" | head -n 1 | grep -oE '[0-9]+$')
  fi
  prompt_ids "$D" "$V" > "$OUT/kvrec-prompt-$s.txt"
  echo "# $s: depth $D, pp $PP, tg $TG, npl $NPL, device $DEVICE${Q4:+, q4}${SYNTH:+, --synth}" | tee -a "$log"
  for w in 1 0; do
    e="CELER_KV_INPLACE_WRITE=$w"
    case " ${ONE_ARMS-1 0} " in *" $w "*) one=1 ;; *) one=0 ;; esac
    case " ${NPL_ARMS-1 0} " in *" $w "*) npl=1 ;; *) npl=0 ;; esac
    [ $one = 1 ] && echo "## $e: one sequence, depth 0 and $D" | tee -a "$log"
    [ $one = 1 ] && for depth in 0 "$D"; do
      timeout "${BENCH_TIMEOUT:-600}" env $e "$BIN" bench --device "$DEVICE" $M -p "$PP" -n "$TG" -d "$depth" -r "$REPS" -o md \
        >> "$log" 2>&1 || { echo "FAILED: $s $e bench -d $depth (exit $?)" | tee -a "$log"; rc=1; }
    done
    [ $npl = 1 ] && echo "## $e: -npl $NPL, prompts $PP and $D" | tee -a "$log"
    [ $npl = 1 ] && { timeout "${BENCH_TIMEOUT:-600}" env $e "$BIN" bench --device "$DEVICE" $M -npl "$NPL" -p "$PP,$D" -n "$TG" \
      -c $((NPL * (D + TG))) -o md >> "$log" 2>&1 || { echo "FAILED: $s $e bench -npl $NPL (exit $?)" | tee -a "$log"; rc=1; }; }
    # greedy, and a seeded draw from the whole distribution: random weights often make
    # greedy repeat one token, while the draw follows every logit
    for k in greedy seeded; do
      a="--temp 0"; [ $k = seeded ] && a="--temp 1 --top-k 0 --top-p 1 --min-p 0 -s 7"
      echo "## $e: $k ($a), a $D-token prompt, $GEN tokens" | tee -a "$log"
      timeout "${BENCH_TIMEOUT:-600}" env $e "$BIN" generate --device "$DEVICE" $M --tokens-file "$OUT/kvrec-prompt-$s.txt" \
        -n "$GEN" $a --ignore-eos > "$OUT/kvrec-$k-$s-$w.txt" 2>> "$log" ||
        { echo "FAILED: $s $e generate $k (exit $?)" | tee -a "$log"; rc=1; }
      cat "$OUT/kvrec-$k-$s-$w.txt" >> "$log"
    done
  done
  for k in greedy seeded; do
    if [ -s "$OUT/kvrec-$k-$s-1.txt" ] && cmp -s "$OUT/kvrec-$k-$s-1.txt" "$OUT/kvrec-$k-$s-0.txt"; then
      echo "$k: identical with CELER_KV_INPLACE_WRITE=1 and =0 ($GEN tokens after $D)" | tee -a "$log"
    else
      echo "FAILED: $k output differs between CELER_KV_INPLACE_WRITE=1 and =0 (or is missing)" | tee -a "$log"; rc=1
    fi
  done
  grep -E '^\| *(pp|tg)|^\| *[0-9]' "$log" | tail -n 12
  [ "${KEEP:-0}" = 1 ] || [ $made = 0 ] || rm -rf "$d"
done
exit $rc
