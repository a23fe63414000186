"""What a steady decode step of each scored policy costs next to the window's, at the same `L` (issue 25).

    python benchmarks/policy_cost.py                        # SmolLM2, bf16, L=1024: docs/policy_cost.md/.json
    python benchmarks/policy_cost.py --dtype float32 --out /tmp/cost   # no half-precision keys to convert
    python benchmarks/policy_cost.py --model tiny --limit 64 --steps 32 --out /tmp/cost

Every variant continues a deep copy of its own prefilled cache (a prompt of `L + 64` tokens read whole, so every
layer is full and evicting; prefilled once, copied untimed before each call, as the sweep does, so a repeat costs
only its timed calls and the variants of one repeat run seconds apart); the timed call is `--steps` decode steps of
greedy `generate`. Variants alternate in this one process (`cachelimit.bench.alternate.measure`): the ratio of each
to the window of the same repeat (and, in a second table, to the window with the
policies' 4 sinks), CPU time, median [min, max], wall time beside it, with the load average. The target: at most
1.15x the window.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VARIANTS = {"window": None, "window + 4 sinks": None, "keydiff": "keydiff", "tova": "tova", "snapkv": "snapkv"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], help="default: bfloat16 (SmolLM2), float32 (tiny)")
    parser.add_argument("--limit", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "policy_cost")
    args = parser.parse_args(argv)

    import torch

    import cachelimit
    from cachelimit.bench.alternate import measure
    from cachelimit.hf.compat import CACHE_ARGUMENT, output_cache

    torch.set_num_threads(args.threads)
    if args.model == "smollm2":
        model, _ = cachelimit.load_pretrained("smollm2", dtype=getattr(torch, args.dtype or "bfloat16"))
    else:
        from cachelimit.cli.tiny_model import build_tiny_model

        model, _ = build_tiny_model()
        if args.dtype:
            model = model.to(getattr(torch, args.dtype))
    cachelimit.patch()
    torch.manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (1, args.limit + 64))
    states: dict[str, tuple] = {}

    def options(name: str) -> dict:
        sinks = 4 if name != "window" else 0
        return {"cache_limit": args.limit, "num_sink_tokens": sinks, "cache_policy": VARIANTS[name]}

    prefilled: dict[str, tuple] = {}

    def prefill(name: str) -> None:
        if name not in prefilled:
            with torch.inference_mode():
                out = model.generate(
                    ids, max_new_tokens=1, do_sample=False, return_dict_in_generate=True, **options(name)
                )
            prefilled[name] = (out.sequences, output_cache(out))
        sequence, cache = prefilled[name]
        states[name] = (sequence, copy.deepcopy(cache))

    def steps(name: str):
        def run():
            sequence, cache = states[name]
            with torch.inference_mode():
                model.generate(
                    sequence,
                    max_new_tokens=args.steps,
                    min_new_tokens=args.steps,
                    do_sample=False,
                    **{CACHE_ARGUMENT: cache},
                )

        return run

    measured = measure(
        {name: steps(name) for name in VARIANTS}, baseline="window", repeats=args.repeats, setup=prefill
    )
    args.out.mkdir(parents=True, exist_ok=True)
    header = (
        f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}, "
        f"model {args.model} ({model.dtype}), L={args.limit}, {args.steps} decode steps per call, "
        f"{args.repeats} repeats\n\n"
    )
    per = f"{args.steps} decode steps"
    # the policies run with 4 sinks, which the window + 4 sinks baseline shares: the policy's own cost, beside the
    # cost against the plain window (the target's baseline)
    same_sinks = dataclasses.replace(measured, baseline="window + 4 sinks")
    text = (
        header
        + "Against the window (no sinks):\n\n"
        + measured.table(per=per)
        + "\nThe same calls against the window with the policies' 4 sinks:\n\n"
        + same_sinks.table(per=per)
    )
    (args.out / "policy_cost.md").write_text(text + "\n")
    (args.out / "policy_cost.json").write_text(json.dumps(measured.to_json(), indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
