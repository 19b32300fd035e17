#!/usr/bin/env python3
"""bench/gpu/transformers_bench.py CONFIG_DIR...: the peer figures for the CUDA benchmark
record. For each checkpoint directory (only its config.json is read; `celer synth`
writes them), builds the model with random bf16 weights on the GPU
(AutoModelForCausalLM.from_config) and times, with CUDA synchronisation, pp512 (one
forward over 512 random tokens) and tg128 (generate() in its default eager loop,
greedy, exactly 128 new tokens after a 16-token prompt). Prints one JSON line per test
with the median of the repetitions."""
import json
import statistics
import sys
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def timed(fn, reps):
    fn()  # warm-up
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def main():
    reps = 3
    for d in sys.argv[1:]:
        cfg = AutoConfig.from_pretrained(d)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model.eval()
        vocab = cfg.get_text_config().vocab_size
        g = torch.Generator(device="cuda").manual_seed(1)
        prompt = torch.randint(0, vocab, (1, 512), device="cuda", generator=g)
        with torch.inference_mode():
            pp = timed(lambda: model(prompt), reps)
            short = prompt[:, :16]
            tg = timed(lambda: model.generate(short, max_new_tokens=128, min_new_tokens=128, do_sample=False,
                                              pad_token_id=0), reps)
        name = cfg.model_type
        print(json.dumps({"config": d, "model_type": name, "test": "pp512", "tok_s": 512 / statistics.median(pp),
                          "samples_s": pp}), flush=True)
        print(json.dumps({"config": d, "model_type": name, "test": "tg128", "tok_s": 128 / statistics.median(tg),
                          "samples_s": tg}), flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
