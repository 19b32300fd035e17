#!/usr/bin/env python3
"""train/reference_default.py: transformers' reference outputs for the default model.

Runs LlamaForCausalLM in float32 on the CPU (eager attention) on
  * the q4 checkpoint dequantized back to float (code * scale + bias), which is what
    celer computes with for that checkpoint, and
  * the bf16 checkpoint,
and writes a JSON record: greedy continuations of fixed prompts (ids, text, the
smallest top-1/top-2 logit gap along the path), the logits after the prompt, the
q4-versus-bf16 logit difference on a held-out chapter, a chat-template rendering
with its greedy answer, tokenizer encodings of a few strings, and seeded samples.

usage: reference_default.py --q4 DIR --bf16 DIR --val-text FILE --out ref.json
"""
import argparse
import json
import os
import sys

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert_default as conv  # noqa: E402

PROMPTS = ["And it came to pass", "In the beginning God", "Blessed are"]
N_GREEDY = 40
TOKENIZER_STRINGS = ["In the beginning God created the heaven and the earth.",
                     "Hello, world! It's 2026; naïve café costs $3.50.\n\n  indented\ttab",
                     "<|user|>\nhi<|eos|>"]


def load(dir_, tensors):
    with open(os.path.join(dir_, "config.json")) as f:
        c = json.load(f)
    for k in ("quantization", "quantization_config"):
        c.pop(k, None)
    c["dtype"] = "float32"
    cfg = LlamaConfig(**{k: v for k, v in c.items() if k not in ("architectures", "transformers_version")})
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:  # the default (sdpa) is as exact in float32 on the CPU
        print("note: eager attention not set:", e)
    m = LlamaForCausalLM(cfg).float().eval()
    sd = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    assert not missing and not unexpected, (missing, unexpected)
    if not torch.equal(m.lm_head.weight, m.model.embed_tokens.weight):
        m.lm_head.weight = m.model.embed_tokens.weight
    return m


@torch.no_grad()
def greedy(m, ids, n, stop=None):
    """Full recompute each step (no cache): ids of the continuation and min margin."""
    seq, out, margin = list(ids), [], float("inf")
    for _ in range(n):
        lg = m(torch.tensor([seq])).logits[0, -1]
        top = torch.topk(lg, 2)
        margin = min(margin, (top.values[0] - top.values[1]).item())
        t = int(top.indices[0])
        out.append(t)
        seq.append(t)
        if stop is not None and t == stop:
            break
    return out, margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--q4", required=True)
    ap.add_argument("--bf16", required=True)
    ap.add_argument("--val-text", required=True, help="a held-out chapter, plain text")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(8)
    tok = AutoTokenizer.from_pretrained(a.q4)
    print("tokenizer class:", type(tok).__name__, flush=True)
    q4 = load(a.q4, conv.load_q4_dequantized(a.q4))
    bf = conv.st_read(os.path.join(a.bf16, "model.safetensors"))
    bf16 = load(a.bf16, {k: conv.as_f32(dt, v) for k, (dt, v) in bf.items()})
    rec = {"bos": tok.bos_token_id, "eos": tok.eos_token_id, "greedy": [], "tokenizer": []}

    for p in PROMPTS:
        ids = tok(p).input_ids
        if ids[0] != tok.bos_token_id:
            ids = [tok.bos_token_id] + ids
        g4, m4 = greedy(q4, ids, N_GREEDY)
        gb, mb = greedy(bf16, ids, N_GREEDY)
        with torch.no_grad():
            lg = q4(torch.tensor([ids])).logits[0, -1]
        top = torch.topk(lg, 10)
        rec["greedy"].append({
            "prompt": p, "prompt_ids": ids,
            "q4_ids": g4, "q4_text": tok.decode(g4), "q4_min_margin": m4,
            "q4_last_logits_top10": {"ids": top.indices.tolist(), "values": top.values.tolist()},
            "bf16_ids": gb, "bf16_text": tok.decode(gb), "bf16_min_margin": mb})
        print(f"{p!r} -> q4 {tok.decode(g4)!r} (margin {m4:.3f})\n{'':>{len(p) + 3}}bf16 {tok.decode(gb)!r}",
              flush=True)

    # q4 versus bf16 on held-out text
    with open(a.val_text) as f:
        vids = tok(f.read()).input_ids[:512]
    with torch.no_grad():
        l4 = q4(torch.tensor([vids])).logits[0]
        lb = bf16(torch.tensor([vids])).logits[0]
        tgt = torch.tensor(vids[1:])
        ce4 = torch.nn.functional.cross_entropy(l4[:-1], tgt).item()
        ceb = torch.nn.functional.cross_entropy(lb[:-1], tgt).item()
    rec["q4_vs_bf16"] = {"tokens": len(vids), "max_abs_logit_diff": (l4 - lb).abs().max().item(),
                         "mean_abs_logit_diff": (l4 - lb).abs().mean().item(),
                         "top1_agreement": (l4.argmax(-1) == lb.argmax(-1)).float().mean().item(),
                         "val_loss_q4": ce4, "val_loss_bf16": ceb}
    print("q4 vs bf16:", json.dumps(rec["q4_vs_bf16"]), flush=True)

    # chat template and a greedy answer
    msgs = [{"role": "user", "content": "In the beginning"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    cids = tok(text, add_special_tokens=False).input_ids
    ans, cm = greedy(q4, cids, 80, stop=tok.eos_token_id)
    rec["chat"] = {"messages": msgs, "rendered": text, "ids": cids, "q4_answer_ids": ans,
                   "q4_answer": tok.decode(ans, skip_special_tokens=True), "min_margin": cm}
    print("chat:", repr(text), "->", repr(rec["chat"]["q4_answer"]), flush=True)

    for s in TOKENIZER_STRINGS:
        ids = tok(s, add_special_tokens=False).input_ids
        rec["tokenizer"].append({"text": s, "ids": ids, "decoded": tok.decode(ids)})

    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)

    # seeded samples (temperature 0.8, top-p 0.95) from the q4 model
    rec["samples"] = []
    for i, p in enumerate(["Then Jesus said", "And God said", "The LORD is my shepherd"]):
        torch.manual_seed(1000 + i)
        ids = tok(p).input_ids if p else [tok.bos_token_id]
        try:
            with torch.no_grad():
                out = q4.generate(torch.tensor([ids]), do_sample=True, temperature=0.8, top_p=0.95, top_k=0,
                                  max_new_tokens=160, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            text = tok.decode(out[0].tolist(), skip_special_tokens=True)
        except Exception as e:
            text = "(generate failed: %r)" % (e,)
        rec["samples"].append({"prompt": p, "seed": 1000 + i, "text": text})
        print(f"sample {i}: {text!r}", flush=True)

    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
