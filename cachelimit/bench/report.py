"""Target ratios and the JSON of a benchmark sweep (see `cachelimit.bench.sweep`).

Every figure is computed from the raw timings the workers return (each cell's `Measurement`, per-step CPU and wall
times, KV bytes after every step), which the JSON keeps, so the tables can be recomputed or challenged from the file
alone. Targets are reported, never asserted: each is a CPU-time ratio paired within one process and repeat, judged
on its median and printed with its [min, max] over the repeats.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import sys
from pathlib import Path

from . import cap
from .alternate import spread
from .plots import plot_all
from .stats import conditions, find, long_run_stats, ratios, summarize_all
from .tables import report_markdown

__all__ = ["find", "long_run_stats", "machine_info", "summarize_all", "targets", "write_report"]


def ratio_row(target: str, values: list[float] | None, bound_met, detail: str) -> dict:
    """A target row: the per-repeat ratios, their median (what `met` judges) and `median [min, max]`."""
    if not values:
        return {"target": target, "measured": None, "met": None, "detail": "not in this sweep"}
    median = statistics.median(values)
    return {
        "target": target, "measured": median, "spread": spread(values), "ratios": values, "met": bound_met(median),
        "detail": detail,
    }  # fmt: skip


def _cell_ratio(cells, name, other, limit, batch, family="mistral") -> tuple[list[float] | None, str]:
    cell = find(cells, role="grid", family=family, limit=limit, batch=batch)
    if not cell or name not in cell["per_variant"] or other not in cell["per_variant"]:
        return None, ""
    summary = cell["measurement"]["summary"]
    mine, theirs = (summary[n]["cpu_s_median"] * 1e3 / cell["per_variant"][n]["steady_steps"] for n in (name, other))
    load = cell["measurement"]["load_before"][0]
    detail = f"{mine:.2f} / {theirs:.2f} CPU ms per step (medians), n={cell['repeats']}, load {load:.1f}"
    return ratios(cell, name, other), detail


def targets(cells: list[dict], long_stats: list[dict]) -> list[dict]:
    """The issue's targets as measured ratios (Mistral, L=1024 or the sweep's largest L)."""
    limits = sorted({c["limit"] for c in cells if c["role"] == "grid"})
    limit = 1024 if 1024 in limits else (limits[-1] if limits else None)
    rows = []
    for name, other, batch, bound in (
        ("native sliding", "native_sliding", 1, 0.85),
        ("native sliding", "native_sliding", 4, 0.70),
        ("ideal", "ideal", 1, 1.05),
        ("ideal", "ideal", 4, 1.05),
    ):
        values, detail = _cell_ratio(cells, "cachelimit", other, limit, batch)
        target = f"cachelimit / {name}, L={limit}, batch {batch} <= {bound:.2f}"
        rows.append(ratio_row(target, values, lambda median, bound=bound: median <= bound, detail))
    worst = None
    for cell in (c for c in cells if c["role"] == "grid" and {"cachelimit", "ideal"} <= set(c["per_variant"])):
        values = ratios(cell, "cachelimit", "ideal")
        where = f"{cell['family']} L={cell['limit']} B={cell['batch']}, n={cell['repeats']}"
        if worst is None or statistics.median(values) > statistics.median(worst[0]):
            worst = (values, where)
    if worst:
        target = "cachelimit / ideal, worst cell of the grid <= 1.05"
        rows.append(ratio_row(target, worst[0], lambda median: median <= 1.05, worst[1]))
    mine = next((s for s in long_stats if s["name"] == "cachelimit"), None)
    if mine:
        target = f"cachelimit flat over {mine['new_tokens']} tokens: CPU ms/step, last / first 10 % after the fill"
        detail = f"{mine['last_tenth_ms']:.2f} / {mine['first_tenth_ms']:.2f} CPU ms (medians over the repeats)"
        rows.append(ratio_row(target + " in [0.95, 1.05]", mine["flatness"], lambda m: abs(m - 1) <= 0.05, detail))
        same = mine["kv_quarter_mib"] == mine["kv_end_mib"]
        rows.append({
            "target": f"cachelimit KV bytes at {mine['quarter_tokens']} tokens == at {mine['new_tokens']} (exact)",
            "measured": mine["kv_end_mib"] / mine["kv_quarter_mib"], "met": same,
            "detail": f"{mine['kv_quarter_mib']:.2f} MiB -> {mine['kv_end_mib']:.2f} MiB",
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
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
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
    long_stats = [row for cell in results if cell["role"] == "long" for row in long_run_stats(cell)]
    cap_rows = cap.cap_stats(results)
    rows = targets(results, long_stats) + cap.cap_targets(cap_rows)
    meta = {
        **machine_info(),
        "torch_threads": sorted({cell["torch_threads"] for cell in results}),
        "estimate_s": estimate_s,
        "duration_s": duration_s,
        "failures": failures,
    }
    report = report_markdown(results, summaries, long_stats, rows, meta, settings)
    if cap_rows:
        cell = next(c for c in results if c["role"] == "cap")
        title = f"## Cap: a limit far above the length ({cap.CAP_PROMPT}-token prompt, {cell['new_tokens']} new tokens"
        report += f"\n\n{title}, batch 1)\n\n{cap.cap_table(cap_rows)}\n\n{conditions(cell)}"
    (out / "table.md").write_text(report + "\n")
    payload = {"meta": meta, "settings": settings, "targets": rows, "summary": summaries, "long": long_stats}
    payload["cap"] = cap_rows
    payload["cells"] = results
    (out / "results.json").write_text(json.dumps(payload, indent=1))
    plot_all(results, out)
    cap.plot_cap(results, out / "bench_cap.png")
    return report
