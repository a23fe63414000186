"""float16 and bfloat16 against float32 on this CPU, for SmolLM2: does the CPU compute them, how well, how fast.

Why: `--dtype` offers float16 only if the device computes it correctly; torch's CPU kernels for half precision have
not always existed or been fast. Printed: per dtype and attention implementation, the largest logit difference from
float32 over one 137-token prompt and the share of positions whose greedy pick agrees; the greedy text of a short
prompt; the CPU time of a 32-token greedy decode, the variants alternated (3 rounds, one thread), as a ratio to
float32 of the same run. Results of a run: docs/dtype_cpu.txt.

    python benchmarks/dtype_cpu.py
"""

from __future__ import annotations

import time

import torch

import cachelimit

DTYPES = ("float32", "bfloat16", "float16")
ROUNDS = 3


def main() -> None:
    torch.set_num_threads(1)
    models = {name: cachelimit.load_pretrained("smollm2", dtype=getattr(torch, name))[0] for name in DTYPES}
    _, tokenizer = cachelimit.load_pretrained("smollm2")
    short = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    story = "Chapter 1\n\nThe lighthouse keeper had not seen a ship in eleven years. " * 8
    long = tokenizer(story, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        reference = models["float32"](long).logits.float()
        for name, model in models.items():
            for attention in ("sdpa", "eager"):
                model.set_attn_implementation(attention)
                logits = model(long).logits.float()
                gap = (logits - reference).abs().max().item()
                agree = (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()
                print(f"{name:9s} {attention:5s} max |logit - float32| {gap:.3f}, greedy picks agreeing {agree:.3f}")
            model.set_attn_implementation("sdpa")
        for name, model in models.items():
            out = model.generate(short, max_new_tokens=12, do_sample=False)
            print(f"{name:9s} {tokenizer.decode(out[0, short.shape[1] :])!r}")
        seconds = {name: [] for name in models}
        for _ in range(ROUNDS):
            for name, model in models.items():
                start = time.process_time()
                model.generate(long, max_new_tokens=32, min_new_tokens=32, do_sample=False)
                seconds[name].append(time.process_time() - start)
    base = sorted(seconds["float32"])[ROUNDS // 2]
    for name in models:
        median = sorted(seconds[name])[ROUNDS // 2]
        print(
            f"{name:9s} CPU s per 32-token decode (prompt {long.shape[1]}): median {median:.2f}, {median / base:.2f}x"
        )


if __name__ == "__main__":
    main()
