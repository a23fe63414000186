"""Why a 4,096-token pass-key prompt read in chunks loses the task at L = 256, even for the oracle keep-set: is it the
header's instruction ("There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it."), which
the oracle evicts but for its first 4 tokens (issue 25)?

Runs the oracle keep-set of `bench --recall` (`bench.recall_oracle`: sinks + the needle's tokens + the most recent)
on the same trials, read in chunks, twice: with the bench's 4 sinks, and with the whole header as sinks. Each line:
sinks, trial, key, the greedy answer, right or wrong; then the hits per setting.

    python benchmarks/recall_header_probe.py --trials 8

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
from cachelimit.bench.recall_oracle import OracleCache, oracle_generate  # noqa: E402
from cachelimit.bench.recall_prompts import pass_key_header_length, pass_key_prompt, score_answer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--depth", type=int, default=50, help="needle depth in %% (default: 50)")
    parser.add_argument("--limit", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--model", choices=MODELS, default="smollm2", help="as `bench --recall` (default: smollm2)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model(args.model, "float32")  # as `bench --recall` loads it
    header = pass_key_header_length(tokenizer)
    for sinks in (4, header):
        hits = 0
        for trial in range(args.trials):
            prompt = pass_key_prompt(tokenizer, args.length, args.depth / 100, 0, trial)
            oracle = OracleCache(model, args.limit, sinks, set(range(*prompt.needle)))
            with torch.inference_mode():
                answer = tokenizer.decode(
                    oracle_generate(oracle, prompt.ids, 10, args.chunk), skip_special_tokens=True
                )
            right = score_answer(answer, prompt.key)
            hits += right
            print(
                f"sinks {sinks}, trial {trial}, key {prompt.key}: {answer!r} {'right' if right else 'wrong'}",
                flush=True,
            )
        print(f"sinks {sinks} ({'the whole header' if sinks == header else 'the bench'}): {hits}/{args.trials} right")


if __name__ == "__main__":
    main()
