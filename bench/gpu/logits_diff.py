#!/usr/bin/env python3
"""bench/gpu/logits_diff.py A B: compares two `celer logits` files (F32 "logits" [T, V]),
standard library only (the GPU machine's python may lack numpy). Prints whether they
are bit-identical and, where not, the first differing row, the rows that differ, the
largest absolute difference per differing row (first 8) and where the argmax moves."""
import json
import struct
import sys
from array import array


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        t = head["logits"]
        if t["dtype"] != "F32":
            sys.exit(f"{path}: logits are {t['dtype']}, not F32")
        a, b = t["data_offsets"]
        f.seek(8 + n + a)
        v = array("f")
        v.frombytes(f.read(b - a))
        return t["shape"], v


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: logits_diff.py A.safetensors B.safetensors")
    (sa, a), (sb, b) = load(sys.argv[1]), load(sys.argv[2])
    if sa != sb:
        sys.exit(f"shapes differ: {sa} against {sb}")
    T, V = sa
    if a.tobytes() == b.tobytes():
        print(f"identical: [{T}, {V}]")
        return
    rows, moved = [], []
    for t in range(T):
        ra, rb = a[t * V:(t + 1) * V], b[t * V:(t + 1) * V]
        if ra.tobytes() == rb.tobytes():
            continue
        d = max(abs(x - y) for x, y in zip(ra, rb))
        rows.append((t, d))
        ia, ib = max(range(V), key=ra.__getitem__), max(range(V), key=rb.__getitem__)
        if ia != ib:
            moved.append(t)
    print(f"differ: {len(rows)} of {T} rows, first {rows[0][0]}; argmax moves in {len(moved)} rows {moved[:8]}")
    print("  max |a - b| per row: " + ", ".join(f"{t}: {d:.3g}" for t, d in rows[:8]))


main()
