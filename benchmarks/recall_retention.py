"""Why a query-aware policy loses the pass key when the prompt is read in chunks: what each scored policy still
holds of the key's digits once the prompt is read, whole and in chunks (issue 25).

For each trial of `bench --recall`'s pass-key case (the same prompts: `bench.recall_prompts.pass_key_prompt`), it
runs `generate` with each scored policy at budget L (4 sinks, the default protected window), reads the columns
every head of every layer holds afterwards (`ScoredLayer.column`), and reports, over layers and KV heads, the mean
share of the key's digit tokens held and the share of heads that hold all of them, with the answer's verdict.

    python benchmarks/recall_retention.py --depths 10,50,90 --trials 3 --out docs/recall/retention.md

SmolLM2-135M-Instruct (or `--model`, loaded as `bench --recall` loads it), float32, one thread. Nothing here is
timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.recall import MODELS, load_model  # noqa: E402
from cachelimit.bench.recall_prompts import pass_key_prompt, score_answer  # noqa: E402
from cachelimit.core.scored_layer import ScoredLayer  # noqa: E402
from cachelimit.hf.compat import output_cache  # noqa: E402

POLICIES = ("keydiff", "tova", "snapkv")


def held_digits(model, tokenizer, prompt, policy: str, limit: int, chunk: int | None) -> tuple[float, float, bool]:
    """(mean share of the key's digit columns held per layer and head, share of heads holding all, right?)"""
    digits = [c for c in range(*prompt.needle) if tokenizer.decode([prompt.ids[c]]).strip().isdigit()]
    ids = torch.tensor([prompt.ids])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), cache_limit=limit, num_sink_tokens=4, cache_policy=policy,
        prefill_chunk_size=chunk, max_new_tokens=10, do_sample=False, return_dict_in_generate=True,
    )  # fmt: skip
    cache = output_cache(out)
    wanted = torch.tensor(digits)
    shares = torch.stack(
        [
            torch.isin(layer.column[0], wanted).sum(-1) / len(digits)
            for layer in cache.layers
            if isinstance(layer, ScoredLayer)
        ]
    )  # fmt: skip  [layers, KV heads]
    answer = tokenizer.decode(out.sequences[0, ids.shape[1] :], skip_special_tokens=True)
    return shares.mean().item(), (shares == 1).float().mean().item(), score_answer(answer, prompt.key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="10,50,90", help="needle depths in %% (default: 10,50,90)")
    parser.add_argument("--trials", type=int, default=3, help="trials per depth (default: 3)")
    parser.add_argument("--length", type=int, default=1024, help="prompt tokens (default: 1024)")
    parser.add_argument("--limit", type=int, default=256, help="cache_limit (default: 256)")
    parser.add_argument("--chunk", type=int, default=256, help="prefill_chunk_size of the chunked read (default: 256)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")
    parser.add_argument("--model", choices=MODELS, default="smollm2", help="as `bench --recall` (default: smollm2)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model(args.model, "float32")  # patched, as `bench --recall` loads it
    header = "| depth | read | " + " | ".join(f"{p}: digits held / heads with all / right" for p in POLICIES) + " |"
    lines = [header, "|" + "---|" * (len(POLICIES) + 2)]
    for depth in (int(part) for part in args.depths.split(",")):
        for chunk in (None, args.chunk):
            cells = {policy: [0.0, 0.0, 0] for policy in POLICIES}
            for trial in range(args.trials):
                prompt = pass_key_prompt(tokenizer, args.length, depth / 100, 0, trial)
                for policy in POLICIES:
                    share, whole, right = held_digits(model, tokenizer, prompt, policy, args.limit, chunk)
                    cells[policy][0] += share / args.trials
                    cells[policy][1] += whole / args.trials
                    cells[policy][2] += right
            read = "whole" if chunk is None else f"chunks of {chunk}"
            values = [f"{a:.2f} / {b:.2f} / {c}/{args.trials}" for a, b, c in cells.values()]
            lines.append(f"| {depth} % | {read} | " + " | ".join(values) + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
