"""`cachelimit bench --long`: is a bounded step at 16k or 32k tokens as cheap as one at L, on a real model?

SmolLM2-135M (offline, `cachelimit.load_pretrained`), float32 and bfloat16, total lengths 2k to 32k: the decode step
of the unbounded cache, of cachelimit (with and without sinks), of transformers' own sliding window and of the ideal
in-place ring (`bench.long_steps`), and the prefill's CPU time and memory with and without `prefill_chunk_size`
(`bench.long_prefill`). Writes results.json (raw timings), table.md and step_cost.png to --out (`bench.long_report`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from .arguments import OneLineErrors, count, int_list, name_list, settings_or_exit, threads

DTYPES = ("float32", "bfloat16")
PARTS = ("steps", "prefill")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="cachelimit bench --long",
        description="Long context on SmolLM2-135M: per-step CPU cost at total length T of the unbounded cache, "
        "cachelimit (+ sinks), transformers' sliding window and the ideal in-place ring; prefill CPU time and "
        "peak memory with and without --prefill-chunk. Writes results.json, table.md and step_cost.png to --out.",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/long"), help="output folder (default: docs/long)")
    parser.add_argument("--dtypes", type=name_list(DTYPES), default=list(DTYPES), help="float32,bfloat16 (both)")
    parser.add_argument("--lengths", type=int_list, default=[2048, 8192, 16384, 32768], help="total lengths T")
    parser.add_argument("--limit", type=count(), default=1024, help="cache_limit L (default 1024)")
    parser.add_argument("--sinks", type=count(0), default=4, help="sinks of the sink variant (default 4)")
    parser.add_argument("--steps", type=count(), default=16, help="decode steps per timed call (default 16)")
    parser.add_argument("--repeats", type=count(), default=3, help="timed calls per variant, alternated (3)")
    parser.add_argument("--prefill-lengths", type=int_list, default=[2048, 8192], help="prompt lengths to prefill")
    parser.add_argument("--prefill-chunk", type=count(), default=1024, help="prefill_chunk_size (default 1024)")
    parser.add_argument("--prefill-repeats", type=count(), default=1, help="timed processes per prefill case (1)")
    parser.add_argument(
        "--prefill-memory-runs",
        type=count(0),
        default=1,
        help="processes per prefill case that measure its memory, with glibc's mmap threshold fixed (1; 0: none)",
    )
    parser.add_argument("--parts", type=name_list(PARTS), default=list(PARTS), help="steps,prefill (both)")
    parser.add_argument("--threads", type=threads, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=count(0), default=0, help="seed of the random keys and ids")
    return parser


def resolve(args: argparse.Namespace) -> dict:
    """The settings, checked together: every T and prompt must exceed L (else nothing is cut), S < L, 2+ steps."""
    if args.sinks >= args.limit:
        raise ValueError(f"--sinks must be in [0, --limit) = [0, {args.limit}), got {args.sinks}")
    if args.steps < 2:
        raise ValueError(f"--steps must be >= 2, got {args.steps}")
    for flag, lengths in (("--lengths", args.lengths), ("--prefill-lengths", args.prefill_lengths)):
        short = [length for length in lengths if length <= args.limit]
        if short:
            raise ValueError(f"{flag} must all be > --limit ({args.limit}): nothing is cut at {short}")
    return {key: getattr(args, key) for key in vars(args)}


def machine() -> str:
    import platform

    import torch
    import transformers

    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    return (
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{datetime.date.today().isoformat()}"
    )


def run_steps(settings: dict, results: dict, save) -> None:
    import torch

    from ..cli.pretrained import load_pretrained
    from ..families.patching import patch
    from .long_steps import measure_steps, native_window_model, same_work

    patch("llama")
    for dtype in settings["dtypes"]:
        model, _ = load_pretrained("smollm2", dtype=getattr(torch, dtype), attn_implementation="sdpa")
        model.generation_config.eos_token_id = None
        native = native_window_model(model, settings["limit"])
        check = same_work(model, native, min(settings["lengths"]), settings["limit"], settings["sinks"])
        results["checks"].append({"dtype": dtype, **check})
        print(f"same work {dtype}: {check}", flush=True)
        for total in settings["lengths"]:
            m = measure_steps(
                model, native, total, settings["limit"], settings["sinks"], settings["steps"], settings["repeats"],
                settings["seed"],
            )  # fmt: skip
            cell = {"dtype": dtype, "total": total, "limit": settings["limit"], "sinks": settings["sinks"]}
            results["steps"].append({**cell, "steps": settings["steps"], "measurement": m.to_json()})
            print(f"steps {dtype} T={total}:\n{m.table(per=str(settings['steps']) + ' steps')}", flush=True)
            save()
        del model, native


def run_prefill(settings: dict, results: dict, save) -> None:
    from .long_prefill import measure_prefill

    for total in settings["prefill_lengths"]:  # shortest first: a run stopped early keeps every dtype's short ones
        for dtype in settings["dtypes"]:
            m, raw, memory = measure_prefill(
                dtype, total, settings["limit"], settings["prefill_chunk"], settings["prefill_repeats"],
                settings["threads"], settings["prefill_memory_runs"],
            )  # fmt: skip
            cell = {"dtype": dtype, "total": total, "limit": settings["limit"], "chunk": settings["prefill_chunk"]}
            results["prefill"].append({**cell, "measurement": m.to_json(), "raw": raw, "memory": memory})
            save()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    settings = settings_or_exit(parser, resolve, parser.parse_args(argv))
    settings["out"] = str(settings["out"])
    import torch

    from .long_report import load_results, write_report

    torch.set_num_threads(settings["threads"])
    out = Path(settings["out"])
    out.mkdir(parents=True, exist_ok=True)
    for part, run in (("steps", run_steps), ("prefill", run_prefill)):
        if part not in settings["parts"]:
            continue
        results: dict = {"machine": machine(), "settings": settings, part: [], "checks": []}
        path = out / f"results_{part}.json"

        def save(results=results, path=path) -> None:  # after every cell: an interrupted run keeps what it measured
            path.write_text(json.dumps(results, indent=1) + "\n")

        run(settings, results, save)
    print(write_report(load_results(out), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
