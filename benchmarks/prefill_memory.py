"""Peak memory of a long prompt's prefill, bounded vs unbounded: the limit must never cost more than no limit.

    python benchmarks/prefill_memory.py                       # 1k ... 32k tokens, the built-in tiny model, SDPA
    python benchmarks/prefill_memory.py --lengths 1024,4096 --out benchmarks/results/prefill

Memory: each run is a fresh process (so its peak RSS is its own; `--repeats` of them per cell, the median
reported): the built-in tiny model (a 4-layer Llama) reads one random prompt of T tokens and generates 4 tokens,
unbounded, with `cache_limit=64`, and with `cache_limit=64, num_sink_tokens=4`. Reported: the process's peak RSS
(`ru_maxrss`) and its ratio to the unbounded run of the same prompt.
Time: one more process per prompt length times the three `generate` calls alternated (`bench.alternate.measure`,
`--time-repeats` rounds after one untimed warm-up): CPU time as a ratio to the unbounded call of the same round,
median [min, max], wall time beside, the load average recorded. Before issue 20 a bounded prefill built an explicit T x T mask:
0.82 GB vs 0.45 GB at 8k tokens, 2.05 GB vs 0.53 GB at 16k, and a 100k-character prompt was killed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VARIANTS = {"unbounded": {}, "cache_limit=64": {"cache_limit": 64}}
VARIANTS["cache_limit=64, 4 sinks"] = {"cache_limit": 64, "num_sink_tokens": 4}


def one_run(length: int, variant: str) -> dict:
    """Runs in the child process: prefill `length` tokens, generate 4; peak RSS and time."""
    import torch

    import cachelimit
    from cachelimit.cli.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    model, tokenizer = build_tiny_model()
    cachelimit.patch("llama")
    ids = torch.randint(0, 256, (1, length), generator=torch.Generator().manual_seed(0))
    started = time.perf_counter()
    with torch.inference_mode():
        model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, **VARIANTS[variant]
        )
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"length": length, "variant": variant, "peak_rss_bytes": peak, "seconds": seconds}


def time_runs(length: int, repeats: int) -> dict:
    """Runs in a child process: the three variants' `generate` calls alternated; the Measurement as JSON."""
    import torch

    import cachelimit
    from cachelimit.bench.alternate import measure
    from cachelimit.cli.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    model, tokenizer = build_tiny_model()
    cachelimit.patch("llama")
    ids = torch.randint(0, 256, (1, length), generator=torch.Generator().manual_seed(0))

    def call(variant: str) -> None:
        with torch.inference_mode():
            model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, **VARIANTS[variant]
            )

    calls = {variant: (lambda variant=variant: call(variant)) for variant in VARIANTS}
    return measure(calls, baseline="unbounded", repeats=repeats, warmup=1).to_json()


def table(rows: list[dict], timings: dict) -> str:
    """Peak RSS (fresh processes) and the CPU-time ratio of the alternated calls, per prompt length and variant."""
    from cachelimit.bench.alternate import measurement_from_json, spread

    lines = [
        "| prompt tokens | variant | peak RSS MiB | vs unbounded | CPU time vs unbounded, median [min, max] | "
        "CPU s per call | wall s per call | n |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = {row["length"]: row["peak_rss_bytes"] for row in rows if row["variant"] == "unbounded"}
    conditions = []
    for row in rows:
        ratio = row["peak_rss_bytes"] / base[row["length"]]
        mib = row["peak_rss_bytes"] / 2**20
        m = measurement_from_json(timings[str(row["length"])])
        s = m.summary(row["variant"])
        lines.append(
            f"| {row['length']:,} | {row['variant']} | {mib:.0f} | {ratio:.3f} | {spread(m.ratios(row['variant']))} | "
            f"{s['cpu_s_median']:.2f} | {s['wall_s_median']:.2f} | {s['n']} |"
        )
        if row["variant"] == "unbounded":
            conditions.append(f"- {row['length']:,} tokens: {m.conditions()}")
    return "\n".join(lines) + "\n\n" + "\n".join(conditions)


def write(out: Path, rows: list[dict], timings: dict, started, argv) -> str:
    from cachelimit.bench.long import machine

    header = (
        f"Machine: {machine()}; started {started:%Y-%m-%d %H:%M} UTC; command: "
        f"`{shlex.join(['benchmarks/prefill_memory.py', *(argv if argv is not None else sys.argv[1:])])}`\n\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), "started": started.isoformat(), "runs": rows, "timings": timings}
    (out / "prefill_memory.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "prefill_memory.md").write_text(header + table(rows, timings) + "\n")
    return header


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="1024,2048,4096,8192,16384,32768", help="prompt lengths, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per cell; the median is reported")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/prefill_memory"), metavar="DIR")
    parser.add_argument("--time-repeats", type=int, default=3, help="timed rounds of the alternated calls (3)")
    parser.add_argument("--child", nargs=2, metavar=("LENGTH", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--time-child", nargs=2, metavar=("LENGTH", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.time_repeats < 1:
        parser.error(f"--time-repeats must be >= 1, got {args.time_repeats}")
    if args.child:
        print(json.dumps(one_run(int(args.child[0]), args.child[1])))
        return 0
    if args.time_child:
        print(json.dumps(time_runs(int(args.time_child[0]), int(args.time_child[1]))))
        return 0
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, timings = [], {}
    for length in [int(part) for part in args.lengths.split(",")]:
        for variant in VARIANTS:
            command = [sys.executable, __file__, "--child", str(length), variant]
            runs = []
            for _ in range(args.repeats):  # RSS moves by a few MiB between identical processes: take the median
                result = subprocess.run(command, capture_output=True, text=True, check=True)
                runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
            runs.sort(key=lambda run: run["peak_rss_bytes"])
            rows.append({**runs[len(runs) // 2], "repeats_peak_rss_bytes": [run["peak_rss_bytes"] for run in runs]})
            print(f"{length:>6} tokens, {variant}: {rows[-1]['peak_rss_bytes'] / 2**20:.0f} MiB peak", flush=True)
        command = [sys.executable, __file__, "--time-child", str(length), str(args.time_repeats)]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        timings[str(length)] = json.loads(result.stdout.strip().splitlines()[-1])
        header = write(args.out, rows, timings, started, argv)  # after every length: a stopped run keeps its rows
    print(header + table(rows, timings))
    worst = max(
        row["peak_rss_bytes"] / next(r["peak_rss_bytes"] for r in rows if r["length"] == row["length"]) for row in rows
    )
    print(f"largest bounded / unbounded peak RSS: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
