#!/usr/bin/env bash
# train/run_device.sh: the whole default-model build on one GPU machine: tokenizer,
# training, conversion to bf16 and MLX q4, and transformers' reference outputs.
# Run from the repository root after train/prepare_corpus.sh, with OUT set to the
# folder that receives the artifacts:
#   q4.tar (the shipped checkpoint dir), model-bf16.safetensors, train_log.json
#   (of the chosen run), sweep.json (every run's log), ref.json.
# SWEEP="STEPS:DROPOUT ..." trains one model per entry and keeps the one with the
# lowest held-out loss (default: the recipe docs/default-model.md records).
# SMOKE=1 first runs the whole pipeline for 60 steps to catch mistakes cheaply.
set -euo pipefail
export PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
W=${WORK:-/tmp/celer-default}
py=${PYTHON:-python3}
SWEEP=${SWEEP:-"800:0.1 1500:0.1 1500:0.2"}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
awk -F'\t' '$1=="Ge" && $2==8 {print $4}' train/data/kjv.tsv > /tmp/val_ge8.txt   # a held-out chapter
finish() {  # $1: a trained run's dir
  $py train/convert_default.py "$1/hf" --bf16 "$1/bf16" --q4 "$1/q4"
  $py train/reference_default.py --q4 "$1/q4" --bf16 "$1/bf16" --val-text /tmp/val_ge8.txt --out "$1/ref.json"
}
if [ "${SMOKE:-0}" = 1 ]; then
  echo "== smoke"
  rm -rf /tmp/celer-smoke
  { $py train/train_default.py --out /tmp/celer-smoke --steps 60 && finish /tmp/celer-smoke; } 2>&1 | tail -n 30
fi
t0=$(date +%s)
rm -rf "$W"; mkdir -p "$W"
i=0
for run in $SWEEP; do
  i=$((i + 1))
  echo "== run $i: steps ${run%%:*}, dropout ${run##*:}"
  $py train/train_default.py --out "$W/run$i" --steps "${run%%:*}" --dropout "${run##*:}"
done
best=$($py - "$W" <<'PY'
import json, glob, sys
logs = sorted(glob.glob(sys.argv[1] + "/run*/train_log.json"))
runs = [dict(json.load(open(p)), dir=p.rsplit("/", 1)[0]) for p in logs]
json.dump(runs, open(sys.argv[1] + "/sweep.json", "w"), indent=1)
for r in runs:
    print(f"# {r['dir']}: steps {r['steps']} dropout {r['args']['dropout']} best val {r['best_val_loss']:.4f} "
          f"at step {r['best_step']}", file=sys.stderr)
print(min(runs, key=lambda r: r["best_val_loss"])["dir"])
PY
)
echo "== chosen: $best"
finish "$best"
echo "pipeline wall time: $(( $(date +%s) - t0 )) s"
tar -C "$best" -cf "$OUT/q4.tar" q4
cp "$best/bf16/model.safetensors" "$OUT/model-bf16.safetensors"
cp "$best/train_log.json" "$best/ref.json" "$W/sweep.json" "$OUT/"
ls -l "$OUT"
