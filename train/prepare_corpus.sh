#!/usr/bin/env bash
# train/prepare_corpus.sh: builds the default model's training corpus, the King James
# Bible (public domain), from Debian's bible-kjv/bible-kjv-text packages.
# Writes train/data/kjv.tsv: one verse a line, "BOOK<TAB>CHAPTER<TAB>VERSE<TAB>TEXT",
# in canonical order (31,102 verses). Needs: apt-get install bible-kjv bible-kjv-text.
set -euo pipefail
cd "$(dirname "$0")"
command -v bible >/dev/null || { echo "prepare_corpus: 'bible' not found; apt-get install bible-kjv bible-kjv-text" >&2; exit 1; }
mkdir -p data
# `bible -f` prints "Ge1:1 In the beginning ..." for every verse, one a line.
bible -f Gen1:1-Rev22:21 |
  sed -E 's/^([0-9]?[A-Za-z]+)([0-9]+):([0-9]+) (.*)$/\1\t\2\t\3\t\4/' > data/kjv.tsv.tmp
n=$(wc -l < data/kjv.tsv.tmp)
bad=$(grep -cv -P '^[0-9]?[A-Za-z]+\t[0-9]+\t[0-9]+\t.+$' data/kjv.tsv.tmp || true)
if [ "$n" != 31102 ] || [ "$bad" != 0 ]; then
  echo "prepare_corpus: expected 31102 well-formed verses, got $n lines ($bad malformed)" >&2; exit 1
fi
mv data/kjv.tsv.tmp data/kjv.tsv
sha256sum data/kjv.tsv
