#!/usr/bin/env python3
"""train/convert_default.py: converts a save_pretrained Llama checkpoint (float32 or
bf16 safetensors) into the two layouts celer ships:

  * bf16: every tensor rounded to bfloat16 (round to nearest even);
  * MLX affine q4, group 64: every 2-D weight whose input dim divides by 64
    (embeddings included) becomes NAME.weight U32 [out, in/8] (8 codes a word,
    code j at bits 4j..4j+3), NAME.scales and NAME.biases bf16 [out, in/64];
    value = code * scale + bias. Per group: scale = (max - min) / 15, bias = min
    (both rounded to bf16 first), code = round((w - bias) / scale) clipped to 0..15.
    Quantization starts from the bf16-rounded weights, as converting a bf16
    checkpoint with mlx-lm would. Everything else stays bf16.

Needs numpy only (no torch, no safetensors package), so it runs anywhere.

usage: convert_default.py HF_DIR --bf16 OUT_BF16 --q4 OUT_Q4
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

GROUP, BITS = 64, 4

# ---------------------------------------------------------------- safetensors I/O

_DT = {"F32": np.float32, "U32": np.uint32, "I32": np.int32, "BF16": np.uint16, "F16": np.float16}


def st_read(path):
    """Returns {name: (dtype string, numpy array)}; BF16 arrives as uint16 bits."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(blob[base + a:base + b], dtype=_DT[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], arr)
    return out


def st_write(path, tensors, metadata=None):
    """tensors: {name: (dtype string, numpy array)}, written in sorted name order."""
    header, chunks, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        dt, arr = tensors[name]
        data = np.ascontiguousarray(arr.astype(_DT[dt], copy=False)).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


# ---------------------------------------------------------------- bf16

def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bits, round to nearest even (no NaNs expected)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def as_f32(dt, arr):
    if dt == "BF16":
        return bf16_bits_to_f32(arr)
    return arr.astype(np.float32)


# ---------------------------------------------------------------- MLX affine q4

def quantize_q4(w):
    """w float32 [out, in] (in % 64 == 0) -> (packed U32 [out, in/8], scales bf16 bits
    [out, in/64], biases bf16 bits [out, in/64])."""
    o, i = w.shape
    g = w.reshape(o, i // GROUP, GROUP)
    mn, mx = g.min(axis=2), g.max(axis=2)
    scale_b = f32_to_bf16_bits((mx - mn) / float((1 << BITS) - 1))
    bias_b = f32_to_bf16_bits(mn)
    scale, bias = bf16_bits_to_f32(scale_b), bf16_bits_to_f32(bias_b)
    safe = np.where(scale > 0, scale, 1.0)
    q = np.rint((g - bias[..., None]) / safe[..., None])
    q = np.clip(q, 0, (1 << BITS) - 1).astype(np.uint32)
    q = np.where(scale[..., None] > 0, q, 0).astype(np.uint32)
    q = q.reshape(o, i // 8, 8)
    packed = np.zeros((o, i // 8), dtype=np.uint32)
    for j in range(8):
        packed |= q[..., j] << np.uint32(4 * j)
    return packed, scale_b, bias_b


def dequantize_q4(packed, scale_b, bias_b):
    """Inverse of quantize_q4: float32 [out, in] = code * scale + bias."""
    o, w8 = packed.shape
    codes = np.stack([(packed >> np.uint32(4 * j)) & np.uint32(15) for j in range(8)], axis=-1)
    codes = codes.reshape(o, w8 * 8 // GROUP, GROUP).astype(np.float32)
    scale, bias = bf16_bits_to_f32(scale_b), bf16_bits_to_f32(bias_b)
    return (codes * scale[..., None] + bias[..., None]).reshape(o, w8 * 8).astype(np.float32)


def load_q4_dequantized(q4_dir):
    """Reads a q4 checkpoint back as {HF name: float32 array} (for the reference)."""
    t = st_read(os.path.join(q4_dir, "model.safetensors"))
    out = {}
    for name, (dt, arr) in t.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        stem = name[: -len(".weight")] if name.endswith(".weight") else None
        if stem and stem + ".scales" in t:
            out[name] = dequantize_q4(arr, t[stem + ".scales"][1], t[stem + ".biases"][1])
        else:
            out[name] = as_f32(dt, arr)
    return out


# ---------------------------------------------------------------- conversion

def convert(hf_dir, bf16_dir, q4_dir):
    src = st_read(os.path.join(hf_dir, "model.safetensors"))
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["dtype"] = "bfloat16"
    cfg.pop("torch_dtype", None)
    bf16, q4 = {}, {}
    n_q = 0
    for name, (dt, arr) in src.items():
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            emb = src["model.embed_tokens.weight"]
            assert emb[1].shape == arr.shape and np.array_equal(as_f32(*emb), as_f32(dt, arr)), \
                "tie_word_embeddings but lm_head.weight differs from model.embed_tokens.weight"
            continue
        b = f32_to_bf16_bits(as_f32(dt, arr))
        bf16[name] = ("BF16", b)
        if arr.ndim == 2 and name.endswith(".weight") and arr.shape[1] % GROUP == 0:
            packed, s, bi = quantize_q4(bf16_bits_to_f32(b))
            stem = name[: -len(".weight")]
            q4[name] = ("U32", packed)
            q4[stem + ".scales"] = ("BF16", s)
            q4[stem + ".biases"] = ("BF16", bi)
            n_q += 1
        else:
            q4[name] = ("BF16", b)
    qcfg = dict(cfg)
    qcfg["quantization"] = {"group_size": GROUP, "bits": BITS}
    qcfg["quantization_config"] = {"group_size": GROUP, "bits": BITS}
    for d, tensors, c in ((bf16_dir, bf16, cfg), (q4_dir, q4, qcfg)):
        if not d:
            continue
        os.makedirs(d, exist_ok=True)
        st_write(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
            f.write("\n")
        for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            p = os.path.join(hf_dir, extra)
            if os.path.exists(p):
                shutil.copy(p, os.path.join(d, extra))
    return n_q


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("--bf16", default=None)
    ap.add_argument("--q4", default=None)
    a = ap.parse_args()
    n = convert(a.hf_dir, a.bf16, a.q4)
    print(f"convert_default: {n} weights quantized to q4/g64")


if __name__ == "__main__":
    main()
