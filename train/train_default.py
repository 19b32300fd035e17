#!/usr/bin/env python3
"""train/train_default.py: trains celer's default model on the King James Bible.

Steps (all in one run, on one GPU; see docs/default-model.md):
  1. reads train/data/kjv.tsv (train/prepare_corpus.sh), groups verses into chapters
     and holds out every 50th chapter for validation;
  2. trains a byte-level BPE tokenizer (HF tokenizers) with special tokens for
     BOS/EOS/PAD and a three-role chat format, and writes tokenizer.json and
     tokenizer_config.json (with a Jinja chat_template);
  3. builds the training stream: every training chapter as a document
     (<|bos|> verses joined by newlines <|eos|>) plus, for about half the verses, a
     one-turn chat (the user gives a verse's first words, the assistant completes
     it), shuffled and packed; batches are random windows of that stream;
  4. trains a LlamaForCausalLM (tied embeddings) with AdamW and a cosine schedule,
     evaluating on the held-out chapters and keeping the best checkpoint;
  5. save_pretrained()s it (float32) to OUT/hf with the tokenizer files, and writes
     OUT/train_log.json (config, steps, loss curve, wall time, GPU).

usage: train_default.py --data train/data/kjv.tsv --out DIR [--time-budget S] [--steps N]
"""
import argparse
import json
import math
import os
import random
import time

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>"]
BOS, EOS, PAD = 0, 1, 2
# GPT-2's pre-tokenizer pattern: contractions, letters, digits, punctuation, spaces.
SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

MODEL = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=1024,
             rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=EOS,
             pad_token_id=PAD, hidden_act="silu", attention_bias=False, mlp_bias=False,
             attention_dropout=0.1)


def read_chapters(path):
    """[(book, chapter, [verse texts])] in canonical order."""
    chapters, key = [], None
    with open(path, encoding="ascii") as f:
        for line in f:
            book, ch, _verse, text = line.rstrip("\n").split("\t")
            if (book, ch) != key:
                key = (book, ch)
                chapters.append((book, int(ch), []))
            chapters[-1][2].append(text)
    return chapters


def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", BOS)])
    return tok


def write_tokenizer(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>",
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def chapter_doc(verses):
    return "<|bos|>" + "\n".join(verses) + "<|eos|>"


def chat_doc(verse, rng):
    """A one-turn chat: the user gives a verse's first words, the assistant the rest."""
    words = verse.split(" ")
    if len(words) < 6:
        return None
    k = rng.randint(2, min(6, len(words) - 3))
    return ("<|bos|><|user|>\n" + " ".join(words[:k]) + "<|eos|>"
            + "<|assistant|>\n" + " ".join(words[k:]) + "<|eos|>")


def encode_docs(tok, docs):
    ids = []
    for e in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(e.ids)
    return ids


def add_residual_dropout(model, p):
    """Dropout on each block's attention and MLP outputs before they join the
    residual stream (training only; forward hooks, so the saved model is plain)."""
    def hook(mod, _inp, out):
        if isinstance(out, tuple):
            return (torch.nn.functional.dropout(out[0], p, mod.training),) + tuple(out[1:])
        return torch.nn.functional.dropout(out, p, mod.training)
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(hook)
        layer.mlp.register_forward_hook(hook)


@torch.no_grad()
def evaluate(model, val, T, dev):
    model.eval()
    n = (len(val) - 1) // T
    x = val[: n * T].view(n, T)
    y = val[1: n * T + 1].view(n, T)
    tot, cnt = 0.0, 0
    for i in range(0, n, 32):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[i:i + 32].to(dev)).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                 y[i:i + 32].to(dev).reshape(-1), reduction="sum")
        tot += loss.item()
        cnt += y[i:i + 32].numel()
    model.train()
    return tot / cnt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="train/data/kjv.tsv")
    ap.add_argument("--out", required=True)
    ap.add_argument("--time-budget", type=float, default=240.0, help="seconds of training (sets the step count)")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --time-budget)")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--dropout", type=float, default=0.1, help="residual dropout after attention and MLP")
    ap.add_argument("--eval-every", type=int, default=100)
    a = ap.parse_args()
    t_start = time.time()
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    hf_dir = os.path.join(a.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    log = {"args": vars(a), "model": MODEL, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__}

    # 1. data
    chapters = read_chapters(a.data)
    train_ch = [c for i, c in enumerate(chapters) if i % 50 != 7]
    val_ch = [c for i, c in enumerate(chapters) if i % 50 == 7]
    log["data"] = {"chapters": len(chapters), "train_chapters": len(train_ch), "val_chapters": len(val_ch),
                   "val_chapter_names": [f"{b} {c}" for b, c, _ in val_ch]}

    # 2. tokenizer (trained on the training chapters only)
    t0 = time.time()
    tok = train_tokenizer(("\n".join(v) for _, _, v in train_ch), MODEL["vocab_size"])
    assert tok.get_vocab_size() == MODEL["vocab_size"], tok.get_vocab_size()
    write_tokenizer(tok, hf_dir)
    log["tokenizer_seconds"] = time.time() - t0

    # 3. token streams
    rng = random.Random(a.seed)
    docs = [chapter_doc(v) for _, _, v in train_ch]
    n_chapter_docs = len(docs)
    for _, _, vs in train_ch:
        for v in vs:
            if rng.random() < 0.5:
                d = chat_doc(v, rng)
                if d:
                    docs.append(d)
    rng.shuffle(docs)
    train_ids = torch.tensor(encode_docs(tok, docs), dtype=torch.long)
    val_ids = torch.tensor(encode_docs(tok, [chapter_doc(v) for _, _, v in val_ch]), dtype=torch.long)
    text_chars = sum(len("\n".join(v)) for _, _, v in train_ch)
    log["data"].update(train_tokens=len(train_ids), val_tokens=len(val_ids), chapter_docs=n_chapter_docs,
                       chat_docs=len(docs) - n_chapter_docs, train_text_chars=text_chars)
    print("data:", json.dumps({k: v for k, v in log["data"].items() if k != "val_chapter_names"}), flush=True)
    train_gpu = train_ids.to(dev)

    # 4. model and training
    cfg = LlamaConfig(**MODEL)
    model = LlamaForCausalLM(cfg).to(dev)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        print("note: tying lm_head to embed_tokens by hand", flush=True)
        model.lm_head.weight = model.model.embed_tokens.weight
    n_params = sum(p.numel() for p in model.parameters())  # tied head counted once
    log["n_params"] = n_params
    print(f"model: {n_params} parameters", flush=True)
    if a.dropout > 0:
        add_residual_dropout(model, a.dropout)
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    B, T = a.batch, a.ctx
    warmup = 200
    total = a.steps or a.max_steps

    def lr_at(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        p = min(1.0, (step - warmup) / max(1, total - warmup))
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    offs = torch.arange(T + 1, device=dev)
    curve, best = [], (float("inf"), -1, None)
    t_train = time.time()
    step = 0
    ema = None
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = torch.randint(0, len(train_gpu) - T - 1, (B,), device=dev, generator=gen)
        chunk = train_gpu[starts[:, None] + offs]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 50 and not a.steps:
            # Fix the step count from the measured speed so training fits the budget.
            torch.cuda.synchronize()
            per = (time.time() - t_train) / 50
            total = max(500, min(a.max_steps, int(a.time_budget / per)))
            print(f"{per * 1000:.1f} ms/step -> {total} steps", flush=True)
        if step % 25 == 0 or step == 1:
            lv = loss.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
        if step % a.eval_every == 0 or step == total:
            vl = evaluate(model, val_ids, T, dev)
            el = time.time() - t_train
            curve.append({"step": step, "train_loss": round(ema, 4), "val_loss": round(vl, 4),
                          "lr": lr_at(step - 1), "seconds": round(el, 1), "tokens": step * B * T})
            print(json.dumps(curve[-1]), flush=True)
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
    torch.cuda.synchronize()
    log["train_seconds"] = time.time() - t_train
    log["steps"] = total
    log["batch_tokens"] = B * T
    log["curve"] = curve
    log["best_val_loss"], log["best_step"] = best[0], best[1]
    log["epochs"] = total * B * T / len(train_ids)
    model.load_state_dict(best[2])
    model.config.attention_dropout = 0.0  # training-only regularizer

    # 5. save
    model.save_pretrained(hf_dir)
    log["wall_seconds"] = time.time() - t_start
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    print(f"trained {total} steps in {log['train_seconds']:.1f} s; best val loss {best[0]:.4f} at step {best[1]}",
          flush=True)


if __name__ == "__main__":
    main()
