"""Statistics, target ratios and the JSON of a benchmark sweep (see `cachelimit.benchmark`).

Every figure is computed from the raw per-step times and memory samples the workers return, which the JSON keeps,
so the tables can be recomputed or challenged from the file alone. Targets are reported, never asserted: timings
on a shared CPU are noisy, so each ratio comes with the medians and spreads it was computed from.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from pathlib import Path

MIB = 1 << 20
WARM_UP = 8  # first decode steps of a run left out of its statistics (allocator and cache warm-up)


def timed_steps(run: dict) -> list[float]:
    steps = run["step_ms"]
    return steps[min(WARM_UP, len(steps) // 8) :]


def summarize(runs: list[dict]) -> dict:
    """One variant in one cell: median / quartiles of the timed steps of all its repeats pooled, each repeat's own
    median (their spread shows the run-to-run noise), tokens/s, KV bytes and the largest peak RSS of the repeats."""
    first = runs[0]
    pooled = [step for run in runs for step in timed_steps(run)]
    q1, median, q3 = statistics.quantiles(pooled, n=4, method="inclusive") if len(pooled) > 1 else pooled * 3
    keys = ("role", "family", "variant", "limit", "batch", "prompt_tokens", "new_tokens", "layer_class", "tokens_sha1")
    return {
        **{key: first[key] for key in keys},
        "repeats": len(runs),
        "median_ms": median,
        "q1_ms": q1,
        "q3_ms": q3,
        "iqr_ms": q3 - q1,
        "repeat_medians_ms": [statistics.median(timed_steps(run)) for run in runs],
        "tokens_per_s": first["batch"] * len(pooled) * 1e3 / sum(pooled),
        "kv_mib": first["kv_bytes"] / MIB,
        "peak_rss_mib": max(run["peak_rss_bytes"] for run in runs) / MIB,
        "prefill_s": statistics.median(run["prefill_s"] for run in runs),
        "same_tokens_every_repeat": len({run["tokens_sha1"] for run in runs}) == 1,
    }


def summarize_all(results: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for run in results:
        key = (run["role"], run["family"], run["variant"], run["limit"], run["batch"])
        groups.setdefault(key, []).append(run)
    return [summarize(runs) for runs in groups.values()]


def long_run_stats(run: dict) -> dict:
    """Flatness (last 10 % of the steps after the window filled vs the first 10 %) and peak-RSS growth from a
    quarter of the run (2k of 8k tokens) to its end."""
    fill = max(0, run["limit"] - run["prompt_tokens"])
    after = run["step_ms"][fill:]
    tenth = max(1, len(after) // 10)
    first, last = statistics.median(after[:tenth]), statistics.median(after[-tenth:])
    quarter = next(sample for sample in run["samples"] if sample[0] >= run["new_tokens"] // 4)
    final = run["samples"][-1]
    return {
        "variant": run["variant"],
        "limit": run["limit"],
        "new_tokens": run["new_tokens"],
        "fill_step": fill,
        "first_tenth_ms": first,
        "last_tenth_ms": last,
        "flatness_ratio": last / first,
        "quarter_tokens": quarter[0],
        "hwm_quarter_mib": quarter[3] / MIB,
        "hwm_end_mib": final[3] / MIB,
        "rss_growth": (final[3] - quarter[3]) / quarter[3],
        "kv_quarter_mib": quarter[1] / MIB,
        "kv_end_mib": final[1] / MIB,
    }


def find(summaries: list[dict], **where) -> dict | None:
    return next((s for s in summaries if all(s[key] == value for key, value in where.items())), None)


def _ratio_row(summaries, target, other, batch, bound, limit) -> dict:
    mine = find(summaries, role="grid", family="mistral", variant="cachelimit", limit=limit, batch=batch)
    theirs = find(summaries, role="grid", family="mistral", variant=other, limit=limit, batch=batch)
    if not (mine and theirs):
        return {"target": target, "measured": None, "met": None, "detail": "not in this sweep"}
    ratio = mine["median_ms"] / theirs["median_ms"]
    detail = (
        f"{mine['median_ms']:.2f} ms (IQR {mine['iqr_ms']:.2f}) / {theirs['median_ms']:.2f} ms "
        f"(IQR {theirs['iqr_ms']:.2f}); repeat medians {_list(mine)} / {_list(theirs)}"
    )
    return {"target": target, "measured": ratio, "met": ratio <= bound, "detail": detail}


def _list(summary: dict) -> str:
    return "[" + ", ".join(f"{value:.1f}" for value in summary["repeat_medians_ms"]) + "]"


def targets(summaries: list[dict], long_stats: list[dict]) -> list[dict]:
    """The issue's targets as measured ratios (Mistral, L=1024 or the sweep's largest L)."""
    limits = sorted({s["limit"] for s in summaries if s["role"] == "grid"})
    limit = 1024 if 1024 in limits else (limits[-1] if limits else None)
    rows = [
        _ratio_row(
            summaries, f"cachelimit / {name}, L={limit}, batch {batch} <= {bound:.2f}", other, batch, bound, limit
        )
        for name, other, batch, bound in (
            ("native sliding", "native_sliding", 1, 0.85),
            ("native sliding", "native_sliding", 4, 0.70),
            ("ideal", "ideal", 1, 1.05),
            ("ideal", "ideal", 4, 1.05),
        )
    ]
    ratios = []
    for mine in (s for s in summaries if s["role"] == "grid" and s["variant"] == "cachelimit"):
        cell = {key: mine[key] for key in ("family", "limit", "batch")}
        ideal = find(summaries, role="grid", variant="ideal", **cell)
        if ideal:
            ratios.append(
                (mine["median_ms"] / ideal["median_ms"], f"{cell['family']} L={cell['limit']} B={cell['batch']}")
            )
    if ratios:
        worst, where = max(ratios)
        target = "cachelimit / ideal, worst cell of the grid <= 1.05"
        rows.append({"target": target, "measured": worst, "met": worst <= 1.05, "detail": where})
    mine = next((s for s in long_stats if s["variant"] == "cachelimit"), None)
    if mine:
        flat = mine["flatness_ratio"]
        tokens = mine["new_tokens"]
        rows.append({
            "target": f"cachelimit flat over {tokens} tokens: last / first 10 % after the window fills in [0.95, 1.05]",
            "measured": flat,
            "met": abs(flat - 1) <= 0.05,
            "detail": f"{mine['last_tenth_ms']:.2f} ms / {mine['first_tenth_ms']:.2f} ms",
        })  # fmt: skip
        rows.append({
            "target": f"cachelimit peak RSS growth from {mine['quarter_tokens']} to {mine['new_tokens']} tokens < 5 %",
            "measured": mine["rss_growth"],
            "met": mine["rss_growth"] < 0.05,
            "detail": f"{mine['hwm_quarter_mib']:.0f} MiB -> {mine['hwm_end_mib']:.0f} MiB",
        })  # fmt: skip
    return rows


def machine_info() -> dict:
    import torch
    import transformers

    import cachelimit

    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        cpuinfo = []
    names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    return {
        "cpu": names[0] if names else platform.processor(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cachelimit": cachelimit.__version__,
    }


def write_report(results, settings, out: Path, estimate_s, duration_s, failures) -> str:
    """Write results.json, table.md and the PNGs to `out`; return the markdown report."""
    from .plots import plot_all
    from .tables import report_markdown

    out.mkdir(parents=True, exist_ok=True)
    summaries = summarize_all(results)
    long_stats = [long_run_stats(run) for run in results if run["role"] == "long"]
    rows = targets(summaries, long_stats)
    meta = {
        **machine_info(),
        "torch_threads": sorted({run["torch_threads"] for run in results}),
        "estimate_s": estimate_s,
        "duration_s": duration_s,
        "failures": failures,
    }
    report = report_markdown(summaries, long_stats, rows, meta, settings)
    (out / "table.md").write_text(report + "\n")
    payload = {"meta": meta, "settings": settings, "targets": rows, "summary": summaries, "long": long_stats}
    payload["runs"] = results
    (out / "results.json").write_text(json.dumps(payload, indent=1))
    plot_all(results, summaries, out)
    return report
