#!/bin/bash
# A = HEAD (2b0e598), F = A + lazy logits, E = F + gidx + guided tasks
for r in 1 2 3; do
  for x in A F E; do
    for m in q06 q06q4; do
      echo "$x $m $(/tmp/celer_$x bench -m /tmp/$m -p 512 -n 128 -r 3 -t 2 --precision fast -o md 2>&1 | grep -E "pp512 |tg128 " | awk -F'|' '{printf "%s %s ", $7, $8}')"
    done
  done
done
