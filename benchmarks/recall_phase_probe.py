"""Why SmolLM2 finds no pass key in the 2,048-token prompts at 10 and 50 % depth, unbounded, when it finds every key
at 1,024 and 4,096 tokens (issue 25): is it the distance, or where the repeated filler happens to be cut?

The prompt builder (`bench.recall_prompts.place_needle`) cuts the filler to fit the length asked, so the filler's
sentence cycle ends at a different phase before the needle and before the question at each length. This probe runs
the unbounded model (plain `generate`, no cachelimit) on pass-key prompts a few tokens longer or shorter than the
bench's and prints, per length, the hits, the filler's last words before the question and the first trial's answer.
If the hits flip within a few tokens of length, the 2,048-token cells measure the prompt's phase, not the reach.

    python benchmarks/recall_phase_probe.py --lengths 2040,2044,2048,2052,2056 --depth 10 --trials 5

SmolLM2-135M-Instruct (or `--model`, loaded as `bench --recall` loads it), float32, one thread, greedy, 10 new
tokens, the bench's seed 0 (so the length 2,048 rows are the journal's trials). Nothing here is timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.arguments import int_list  # noqa: E402
from cachelimit.bench.recall import MODELS, load_model  # noqa: E402
from cachelimit.bench.recall_prompts import PASS_KEY_QUESTION, pass_key_prompt, score_answer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int_list, default=[2040, 2044, 2048, 2052, 2056])
    parser.add_argument("--depth", type=int, default=10, help="needle depth in %% (default: 10)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--model", choices=MODELS, default="smollm2", help="as `bench --recall` (default: smollm2)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model(args.model, "float32")  # as `bench --recall` loads it
    question = len(tokenizer(PASS_KEY_QUESTION, add_special_tokens=False)["input_ids"])
    for length in args.lengths:
        hits, answers = 0, []
        for trial in range(args.trials):
            prompt = pass_key_prompt(tokenizer, length, args.depth / 100, 0, trial)
            ids = torch.tensor([prompt.ids])
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
            answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            hits += score_answer(answer, prompt.key)
            answers.append(answer)
        tail = tokenizer.decode(prompt.ids[-question - 8 : -question])
        print(
            f"length {length}, depth {args.depth} %: {hits}/{args.trials} right; filler ends {tail!r}; "
            f"trial 0 answers {answers[0]!r}",
            flush=True,
        )


if __name__ == "__main__":
    main()
