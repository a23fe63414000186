"""Statistics, target ratios and the JSON of a benchmark sweep (see `cachelimit.benchmark`).

Every figure is computed from the raw per-step times and memory samples the workers return, which the JSON keeps,
so the tables can be recomputed or challenged from the file alone. Targets are reported, never asserted: timings
on a shared CPU are noisy, so each ratio comes with the medians and spreads it was computed from.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from . import cap
from .plots import plot_all
from .stats import find, long_run_stats, summarize, summarize_all
from .tables import report_markdown

__all__ = ["find", "long_run_stats", "machine_info", "summarize", "summarize_all", "targets", "write_report"]


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
    out.mkdir(parents=True, exist_ok=True)
    summaries = summarize_all(results)
    long_stats = [long_run_stats(run) for run in results if run["role"] == "long"]
    cap_rows = cap.cap_stats(results)
    rows = targets(summaries, long_stats) + cap.cap_targets(cap_rows)
    meta = {
        **machine_info(),
        "torch_threads": sorted({run["torch_threads"] for run in results}),
        "estimate_s": estimate_s,
        "duration_s": duration_s,
        "failures": failures,
    }
    report = report_markdown(summaries, long_stats, rows, meta, settings)
    if cap_rows:
        tokens = cap_rows[0]["new_tokens"]
        title = f"## Cap: a limit far above the length ({cap.CAP_PROMPT}-token prompt, {tokens} new tokens, batch 1)"
        report += f"\n\n{title}\n\n{cap.cap_table(cap_rows)}"
    (out / "table.md").write_text(report + "\n")
    payload = {"meta": meta, "settings": settings, "targets": rows, "summary": summaries, "long": long_stats}
    payload["cap"] = cap_rows
    payload["runs"] = results
    (out / "results.json").write_text(json.dumps(payload, indent=1))
    plot_all(results, summaries, out)
    cap.plot_cap(results, out / "bench_cap.png")
    return report
