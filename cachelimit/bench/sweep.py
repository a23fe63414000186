"""Benchmark sweep: is cachelimit the fastest way to generate long in bounded memory with transformers?

Compares, on the same seeded weights, six ways to decode: the unbounded dynamic cache, transformers' own sliding
window (Mistral `sliding_window = L + 1`, dynamic and static layers: they copy the whole window every step),
cachelimit (`cache_limit=L`, and with 4 sinks), and an "ideal" cache that only writes each new token in place into
L + 1 preallocated slots (the speed bound). Each cell (a model, L, batch) runs in one fresh process, where its variants
are timed through `model.generate`, alternated (`bench.cell`, `bench.alternate.measure`): CPU-time ratios to the
ideal cache of the same repeat, median [min, max], wall time beside, load average recorded. The grid runs start from an L-token prompt, so every timed step decodes with a full
window; one long run (8k tokens, L=1024) shows the window filling, then staying flat in time and memory; the "cap"
scenario (`bench.cap`) checks that a limit far above the length costs what the unbounded cache costs.

Entry point: `main(argv)` (also `cachelimit bench`, `python benchmarks/run_benchmarks.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from . import report as bench_report
from . import runner
from .arguments import OneLineErrors, int_list, name_list, settings_or_exit, threads
from .cap import CAP_PROMPT, cap_variants

VARIANTS = {
    "dynamic": "unbounded DynamicCache",
    "native_sliding": "transformers sliding window (dynamic layer: cat + slice)",
    "native_static": "transformers sliding window, static cache (roll)",
    "cachelimit": "cachelimit cache_limit=L",
    "cachelimit_sinks": "cachelimit cache_limit=L, 4 sinks",
    "ideal": "ideal: in-place write into L+1 slots",
}
NATIVE = ("native_sliding", "native_static")  # need a native sliding window: Mistral only
MODELS = ("mistral", "gpt2")
LONG_VARIANTS = ("dynamic", "native_sliding", "cachelimit", "ideal")
FULL = {"shape": "full", "limits": [128, 512, 1024, 2048], "batches": [1, 4], "tokens": 128, "long_tokens": 8192}
FULL["cap_tokens"] = 512
QUICK = {"shape": "quick", "limits": [128, 512], "batches": [1], "tokens": 48, "long_tokens": 768, "cap_tokens": 128}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="cachelimit bench",
        description="Per-token time, tokens/s, KV bytes and peak RSS of bounded generation: cachelimit vs "
        "transformers' sliding windows, the unbounded cache and an ideal in-place cache. Writes results.json, "
        "table.md and PNG plots to --out.",
        epilog="Variants: " + "; ".join(f"{name} = {text}" for name, text in VARIANTS.items()),
    )
    parser.add_argument("--quick", action="store_true", help="small model, L=128/512, batch 1, few tokens (<2 min)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="output folder")
    parser.add_argument(
        "--tokens", type=int, help="tokens generated per grid run after an L-token prompt (128; quick: 48)"
    )
    parser.add_argument(
        "--long-tokens", type=int, help="tokens of the long run at --long-limit, batch 1 (8192; quick: 768; 0: skip)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed rounds per cell, its variants alternated in one process (3)"
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds per cell before the timed ones (1)")
    parser.add_argument("--long-limit", type=int, default=None, help="cache limit of the long run (1024; quick: 128)")
    parser.add_argument(
        "--cap-tokens",
        type=int,
        help="tokens of the cap scenario: limits 100x the length, 2**30 and one crossed half-way, vs unbounded "
        "(512; quick: 128; 0: skip)",
    )
    parser.add_argument("--cap-only", action="store_true", help="run only the cap scenario (no grid, no long run)")
    parser.add_argument("--limits", type=int_list, help="cache limits L, e.g. 128,512,1024,2048")
    parser.add_argument("--batches", type=int_list, help="batch sizes, e.g. 1,4")
    parser.add_argument("--models", type=name_list(MODELS), default=list(MODELS), help="mistral,gpt2")
    parser.add_argument("--variants", type=name_list(tuple(VARIANTS)), default=list(VARIANTS), help=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and prompts")
    parser.add_argument(
        "--threads", type=threads, default=None, help="torch threads per run (default: torch's default)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="keep the runs an interrupted sweep left in OUT/runs.jsonl; run the rest"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and the estimated duration, run nothing"
    )
    parser.add_argument(
        "--shared-process",
        action="store_true",
        help="run everything in one worker process (faster start; peak RSS is then not per variant). --quick sets it",
    )
    return parser


def resolve(args: argparse.Namespace) -> dict:
    """The sweep's settings: the mode's defaults, overridden by what was given."""
    mode = QUICK if args.quick else FULL
    settings = {
        "shape": mode["shape"],
        "limits": args.limits or mode["limits"],
        "batches": args.batches or mode["batches"],
        "tokens": args.tokens if args.tokens is not None else mode["tokens"],
        "long_tokens": args.long_tokens if args.long_tokens is not None else mode["long_tokens"],
        "long_limit": args.long_limit or (128 if args.quick else 1024),
        "cap_tokens": args.cap_tokens if args.cap_tokens is not None else mode["cap_tokens"],
        "cap_only": args.cap_only,
        "models": args.models,
        "variants": args.variants,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "seed": args.seed,
        "threads": args.threads,
        "shared_process": args.shared_process or args.quick,
        "quick": args.quick,
    }
    for name, minimum in (
        ("tokens", 4),
        ("long_tokens", 0),
        ("repeats", 1),
        ("warmup", 0),
        ("long_limit", 1),
        ("cap_tokens", 0),
    ):
        if settings[name] < minimum:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {minimum}, got {settings[name]}")
    return settings


def plan(settings: dict) -> list[dict]:
    """Every cell of the sweep, each one job (one process, its variants alternated in it, `bench.cell`): the grid
    (L-token prompt: the window is full from the first step), then the long run, then the cap scenario."""
    jobs = [] if settings.get("cap_only") else _grid_and_long_jobs(settings)
    if settings.get("cap_tokens") and "mistral" in settings["models"]:
        variants = [[name, variant, limit] for variant, limit, name in cap_variants(settings["cap_tokens"])]
        job = _job(settings, "cap", "mistral", variants, 0, 1, CAP_PROMPT, settings["cap_tokens"])
        jobs.append({**job, "sample_every": 1})  # KV bytes after every step
    positions = {family: 0 for family in MODELS}
    for job in jobs:
        positions[job["family"]] = max(positions[job["family"]], job["prompt_tokens"] + job["new_tokens"])
    for job in jobs:  # one size per family and sweep: GPT-2's position table is part of its (shared) weights
        job["positions"] = -(-positions[job["family"]] // 256) * 256
    return jobs


def _grid_and_long_jobs(settings: dict) -> list[dict]:
    jobs = []
    for family in settings["models"]:
        names = [v for v in settings["variants"] if family == "mistral" or v not in NATIVE]
        for limit in settings["limits"]:
            for batch in settings["batches"]:
                variants = [[name, name, limit] for name in names]
                jobs.append(_job(settings, "grid", family, variants, limit, batch, limit, settings["tokens"]))
    names = [name for name in LONG_VARIANTS if name in settings["variants"]]
    if settings["long_tokens"] and "mistral" in settings["models"] and names:
        limit = settings["long_limit"]
        variants = [[name, name, limit] for name in names]
        jobs.append(_job(settings, "long", "mistral", variants, limit, 1, min(32, limit), settings["long_tokens"]))
    return jobs


def _job(settings, role, family, variants, limit, batch, prompt_tokens, new_tokens) -> dict:
    names = [name for name, _, _ in variants]
    return {
        "role": role,
        "family": family,
        "variants": variants,  # [name, variant, cache limit]
        "baseline": "ideal" if "ideal" in names else names[0],
        "limit": limit,
        "batch": batch,
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "shape": settings["shape"],
        "seed": settings["seed"],
        "threads": settings["threads"],
        "repeats": settings["repeats"],
        "warmup": settings["warmup"],
        "sample_every": 64 if role == "long" else 16,
        "progress": True,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and write results.json, table.md and the plots to --out; returns a process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = settings_or_exit(parser, resolve, args)
    try:
        import matplotlib  # noqa: F401  (the plots need it: fail before an hour of measuring, not after)
        from tqdm.auto import tqdm
    except ImportError as error:
        print(f"cachelimit bench needs tqdm and matplotlib (pip install 'cachelimit[cli]'): {error}", file=sys.stderr)
        return 2
    jobs = plan(settings)
    if not jobs:
        print("cachelimit bench: nothing to run for these --models/--variants.", file=sys.stderr)
        return 2
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    settings["load_average_at_start"] = load
    if settings["threads"] is None and load > 0.5:
        print(
            f"Note: the CPU is already busy (1-min load {load:.1f}). torch's default thread count stalls on a shared "
            "CPU (each op waits for every thread); --threads 1 gives steadier timings.",
            flush=True,
        )
    journal = args.out / "runs.jsonl"  # each finished run is appended here (see --resume)
    done = runner.load_journal(journal, jobs) if args.resume else []
    finished = {runner.job_key(result) for result in done}
    todo = [job for job in jobs if runner.job_key(job) not in finished]
    settings["resumed_runs"] = len(done)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cachelimit-bench-") as tmp:
        print(f"cachelimit bench: {len(todo)} runs to do ({len(done)} kept from {journal}); estimating...", flush=True)
        seconds = runner.estimate(todo, settings, runner.calibrate(settings, Path(tmp))) if todo else 0.0
        guess = "unknown (calibration failed)" if seconds is None else f"{seconds / 60:.1f} min"
        print(f"Estimated duration: {guess} (other load on the CPU makes it longer).", flush=True)
        if args.dry_run:
            for job in todo:
                names = ", ".join(name for name, _, _ in job["variants"])
                print(
                    f"  {runner.describe(job)}: prompt {job['prompt_tokens']}, {job['new_tokens']} new tokens: {names}"
                )
            return 0
        args.out.mkdir(parents=True, exist_ok=True)
        if not args.resume:
            journal.write_text("")
        with tqdm(total=sum(map(runner.job_steps, todo)), unit="step", dynamic_ncols=True) as progress:
            results, failures = runner.run_sweep(todo, settings, Path(tmp), progress, journal)
        results = done + results
    duration = time.perf_counter() - started
    if not results:
        print("cachelimit bench: every run failed:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    report = bench_report.write_report(results, settings, args.out, seconds, duration, failures)
    print(report)
    print(f"Took {duration / 60:.1f} min (estimated {guess}). Results in {args.out}/")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
