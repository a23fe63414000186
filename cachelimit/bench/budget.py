"""The budget scenario: what a bounded cache is for, measured. More rows in the same KV memory.

The person who first asked for `cache_limit` wanted to keep the cache to a maximum size so as to "tweak other
parameters such as batch size or number of beams, to generate faster and take the most out of their hardware".
Given a KV-memory budget and a generation length T, this scenario computes (`bench.budget_fit`, from the documented
memory layout) the largest batch and the largest `num_beams` whose caches fit, unbounded and with `cache_limit=L`,
runs each of them in a fresh process (`bench.budget_run`), and reports the KV bytes the caches held (read from them,
and compared with the fit), the process's peak memory and the aggregate tokens per CPU second and per wall-clock
second (rows x T / seconds, rows = batch x beams). Models: the sweep's seeded Mistral-shaped benchmark model and
SmolLM2-135M-Instruct.

Method (issue 28): a run's peak RSS is only its own in a process of its own, so the two caches cannot alternate
inside one process as the other benchmarks' variants do; instead, for each (model, mode), repeat r runs the
unbounded cache and then the bounded one back to back, for r = 1..--repeats, and the report pairs the two runs of
the same repeat (`bench.budget_report`): ratios median [min, max] over the repeats, wall time beside CPU time, the
load average each run recorded.

Entry point: `main(argv)` (also `cachelimit bench --budget`, `python benchmarks/run_budget.py`). Every finished run
is appended to OUT/budget_runs.jsonl, so an interrupted scenario resumes with `--resume`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from . import runner
from .arguments import OneLineErrors, settings_or_exit, threads
from .budget_fit import KVLayout, row_bytes, rows_that_fit
from .budget_report import repeat_of, write_report
from .progress import RunProgress

MODELS = ("bench", "smollm2")
MODES = ("batch", "beams")
WORKER = "cachelimit.bench.budget_run"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="cachelimit bench --budget",
        description="In a fixed KV-memory budget, the largest batch and num_beams that fit unbounded and with "
        "cache_limit=L, each run through generate: KV bytes held, peak RSS, aggregate tokens/s. Writes "
        "budget.json, budget_table.md and budget.png to --out.",
    )
    parser.add_argument("--budget-mib", type=float, default=512.0, help="KV-memory budget in MiB (default: 512)")
    parser.add_argument("--new-tokens", type=int, default=2048, help="tokens generated per row, T (default: 2048)")
    parser.add_argument("--limit", type=int, default=256, help="cache_limit L of the bounded runs (default: 256)")
    parser.add_argument("--sinks", type=int, default=0, help="num_sink_tokens of the bounded runs (default: 0)")
    parser.add_argument("--prompt-tokens", type=int, default=32, help="prompt tokens per row (default: 32)")
    parser.add_argument("--models", default=",".join(MODELS), help="bench (Mistral-shaped, seeded), smollm2")
    parser.add_argument("--shape", choices=("full", "quick"), default="full", help="the bench model's shape")
    parser.add_argument("--modes", default=",".join(MODES), help="batch (greedy rows), beams (one prompt, num_beams)")
    parser.add_argument(
        "--threads", type=threads, default=None, help="torch threads per run (default: torch's default)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each cache per model and mode, alternated (default: 3)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the bench model's weights and prompts")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/budget"), help="output folder")
    parser.add_argument("--resume", action="store_true", help="keep the finished runs in OUT/budget_runs.jsonl")
    parser.add_argument("--dry-run", action="store_true", help="print the fit (rows per run), run nothing")
    parser.add_argument("--report-only", action="store_true", help="write the report from the journal, run nothing")
    return parser


def _names(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise ValueError(f"{flag}: unknown {unknown or text!r}; choose from {', '.join(allowed)}")
    return names


def settings_of(args: argparse.Namespace) -> dict:
    """The scenario's settings, checked (a ValueError names the flag and the allowed range)."""
    settings = {
        "budget_bytes": int(args.budget_mib * 2**20),
        "new_tokens": args.new_tokens,
        "limit": args.limit,
        "sinks": args.sinks,
        "prompt_tokens": args.prompt_tokens,
        "models": _names(args.models, MODELS, "--models"),
        "modes": _names(args.modes, MODES, "--modes"),
        "shape": args.shape,
        "threads": args.threads,
        "seed": args.seed,
        "repeats": args.repeats,
    }
    for flag, value, minimum in (
        ("--budget-mib", settings["budget_bytes"], 1),
        ("--new-tokens", args.new_tokens, 2),
        ("--limit", args.limit, 1),
        ("--prompt-tokens", args.prompt_tokens, 1),
        ("--repeats", args.repeats, 1),
    ):
        if value < minimum:
            raise ValueError(f"{flag} must be >= {minimum}, got {value}")
    if not 0 <= args.sinks < args.limit:
        raise ValueError(f"--sinks must be in [0, --limit), got {args.sinks}")
    return settings


def _job(settings: dict, layout: KVLayout, model: str, mode: str, limit: int | None) -> dict:
    """One run of one cache, with the most rows whose caches fit in the budget (0 if not even one does)."""
    sinks = settings["sinks"] if limit is not None else 0
    per_row = row_bytes(layout, settings["prompt_tokens"], settings["new_tokens"], limit, sinks)
    rows = rows_that_fit(settings["budget_bytes"], per_row)
    job = {key: settings[key] for key in ("new_tokens", "prompt_tokens", "shape", "seed", "threads")}
    job.update(model=model, mode=mode, limit=limit, sinks=sinks, rows=rows, budget=settings["budget_bytes"])
    job.update(batch=rows if mode == "batch" else 1, num_beams=rows if mode == "beams" else 1)
    job.update(predicted_row_bytes=per_row, predicted_kv_bytes=rows * per_row)
    return job


def plan(settings: dict, layouts: dict[str, KVLayout]) -> list[dict]:
    """Every run: per model and mode, the unbounded cache and `cache_limit=L`, each with the most rows that fit,
    alternated: repeat 1 of both, then repeat 2 of both, and so on (`repeat` from 1), so that the two runs a ratio
    pairs ran back to back. A cache of which not even one row fits is planned with 0 rows (reported, not run)."""
    jobs = []
    for model in settings["models"]:
        for mode in settings["modes"]:
            caches = [_job(settings, layouts[model], model, mode, limit) for limit in (None, settings["limit"])]
            for repeat in range(1, settings["repeats"] + 1):
                jobs += [{**job, "repeat": repeat} for job in caches]
    return jobs


def describe(job: dict) -> str:
    cache = "unbounded" if job["limit"] is None else f"cache_limit={job['limit']}"
    cache += f", {job['sinks']} sinks" if job["sinks"] else ""
    rows = f"batch {job['batch']}" if job["mode"] == "batch" else f"num_beams {job['num_beams']}"
    return f"{job['model']} {cache} {rows}"


#: what makes two runs the same run (`--resume` keeps a finished one)
KEYS = ("model", "mode", "repeat", "limit", "sinks", "rows", "new_tokens", "prompt_tokens", "shape", "seed",
        "threads")  # fmt: skip


def _key(job: dict) -> str:
    """What makes a run the same run for `--resume`; a record from before repeats existed is repeat 1."""
    return json.dumps({key: job.get(key) for key in KEYS} | {"repeat": repeat_of(job)}, sort_keys=True)


def probe_layouts(models: list[str], settings: dict, workdir: Path) -> dict[str, KVLayout]:
    """Each model's KV layout, read from the model itself in a worker (its config and dtype)."""
    layouts = {}
    for model in models:
        spec = {"probe": True, "model": model, "shape": settings["shape"], "seed": settings["seed"]}
        spec["threads"] = settings["threads"]
        result, stderr = runner._run_worker([spec], workdir, f"probe-{model}", lambda line: None, module=WORKER)
        if result is None:
            raise RuntimeError(f"could not load the {model} model: {(stderr.strip().splitlines() or ['?'])[-1]}")
        layouts[model] = KVLayout(**result[0]["layout"])
    return layouts


def _finished(result: dict) -> str:
    held, peak = result["kv_bytes_end"] / 2**20, result["peak_rss_bytes"] / 2**20
    check = "as fitted" if result["kv_bytes_end"] == result["predicted_kv_bytes"] else "NOT AS FITTED"
    return (
        f"KV held {held:,.1f} MiB ({check}), peak RSS {peak:,.0f} MiB, {result['tokens_per_second']:.1f} tokens/s "
        f"({result['seconds']:.0f} s)"
    )


def run_jobs(jobs: list[dict], journal: Path, workdir: Path) -> list[str]:
    """Run every job with rows in its own process, appending each result to the journal; returns the failures."""
    runnable = [job for job in jobs if job["rows"] > 0]
    progress, failures = RunProgress(len(runnable)), []
    for index, job in enumerate(runnable):
        label = f"{describe(job)}, repeat {job['repeat']}"
        with progress.run(label, job["new_tokens"], "step") as bar:

            def on_line(line: str, bar=bar) -> None:
                kind, _, value = line.partition(" ")
                if kind == "@steps":
                    bar.update(int(value))

            output, stderr = runner._run_worker([job], workdir, index, on_line, module=WORKER)
            if output is None:
                failures.append(f"{label}: {(stderr.strip().splitlines() or ['no output'])[-1]}")
                bar.finish(f"FAILED\n{stderr[-2000:]}")
                continue
            with journal.open("a") as handle:
                handle.write(json.dumps(output[0]) + "\n")
            bar.finish(_finished(output[0]))
    return failures


def _records(journal: Path) -> list[dict]:
    return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()] if journal.exists() else []


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = settings_or_exit(parser, settings_of, args)
    args.out.mkdir(parents=True, exist_ok=True)
    journal = args.out / "budget_runs.jsonl"
    if args.report_only:
        print(write_report(_records(journal), args.out))
        return 0
    with tempfile.TemporaryDirectory(prefix="cachelimit-budget-") as tmp:
        layouts = probe_layouts(settings["models"], settings, Path(tmp))
        jobs = plan(settings, layouts)
        for job in (job for job in jobs if job["repeat"] == 1):
            print(f"fit: {describe(job)}: {job['predicted_row_bytes'] / 2**20:,.2f} MiB per row", flush=True)
        if args.dry_run:
            return 0
        if not args.resume:
            journal.write_text("")
        kept = {_key(record) for record in _records(journal)}
        with journal.open("a") as handle:  # a cache of which no row fits is a result too: reported, never run
            handle.writelines(json.dumps(job) + "\n" for job in jobs if job["rows"] == 0 and _key(job) not in kept)
        failures = run_jobs([job for job in jobs if _key(job) not in kept], journal, Path(tmp))
    planned = {_key(job) for job in jobs}
    print(write_report([record for record in _records(journal) if _key(record) in planned], args.out))
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
