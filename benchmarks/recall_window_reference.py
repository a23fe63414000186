"""Is a surprising recall cell of the window the window's definition, or a fault? (issue 25)

The window without sinks, reading a 1,024-token pass-key prompt in chunks of 256, finds the key 90 % deep (about 130
positions back) in 20 of 20 trials at L = 256 and in 1 of 20 at L = 512. This re-runs such trials as `bench --recall`
does and checks each greedy answer against the test suite's independent reference (`tests/reference.py`: one
cache-free forward of the prompt and the answer with a banded 4D mask, every token reading its last L positions,
explicit positions): when the two agree token for token, the cell measures the model under that window.

    python benchmarks/recall_window_reference.py --limits 512,256 --trials 0,5

SmolLM2-135M-Instruct (or `--model`), float32, one thread. Nothing here is timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.recall import MODELS, load_model  # noqa: E402
from cachelimit.bench.recall_prompts import pass_key_prompt, score_answer  # noqa: E402
from cachelimit.bench.recall_run import answer_prompt  # noqa: E402
from tests.reference import generated_step_logits  # noqa: E402


def numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", type=numbers, default=[512, 256])
    parser.add_argument("--trials", type=numbers, default=[0, 5])
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=90, help="needle depth in %% (default: 90)")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--model", choices=MODELS, default="smollm2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model(args.model, "float32")
    agree = 0
    for limit in args.limits:
        for trial in args.trials:
            prompt = pass_key_prompt(tokenizer, args.length, args.depth / 100, 0, trial)
            answer = answer_prompt(model, prompt, "window", limit, args.chunk, 10)
            sequence = torch.tensor([prompt.ids + answer])
            with torch.inference_mode():
                reference = generated_step_logits(
                    model, sequence, torch.ones(1, len(prompt.ids), dtype=torch.long), limit, window_prefill=True
                )
            same = reference[0].argmax(-1).tolist() == answer
            agree += same
            text = tokenizer.decode(answer, skip_special_tokens=True)
            right = "right" if score_answer(text, prompt.key) else "wrong"
            print(
                f"L {limit}, trial {trial}, key {prompt.key}: {text!r} {right}; reference agrees: {same}", flush=True
            )
    print(f"{agree} of {len(args.limits) * len(args.trials)} answers equal the banded reference's greedy tokens")


if __name__ == "__main__":
    main()
