"""The long-context report (`cachelimit bench --long`): results.json -> table.md and step_cost.png.

Everything is rebuilt from the raw timings in results.json (each cell's `Measurement.to_json()`), so a table can be
remade, or read against another baseline, without measuring again: a step ratio pairs a variant's call with the other
variant's call of the same repeat (`dataclasses.replace(measurement, baseline=...)`).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from .alternate import measurement_from_json, spread
from .long_steps import AT_LIMIT, CACHELIMIT, IDEAL, NATIVE, SINKS_VARIANT, UNBOUNDED, VARIANTS
from .plots import save_figure

MIB = 1 << 20
#: the ratio columns of the step table: (heading, the variant divided by)
STEP_BASELINES = (
    ("vs unbounded at T", UNBOUNDED),
    ("vs unbounded at T=L", AT_LIMIT),
    ("vs native window", NATIVE),
    ("vs ideal ring", IDEAL),
)
BOUNDED = (CACHELIMIT, SINKS_VARIANT, NATIVE, IDEAL)
STYLE = {
    UNBOUNDED: {"marker": "o"},
    AT_LIMIT: {"linestyle": ":", "color": "grey"},
    CACHELIMIT: {"linewidth": 2.2, "marker": "s"},
    SINKS_VARIANT: {"marker": "^"},
    NATIVE: {"marker": "x"},
    IDEAL: {"linestyle": "--"},
}


def step_rows(cell: dict) -> list[dict]:
    """One row per variant of one (dtype, T) cell: CPU and wall ms per step (medians), ratios to every baseline."""
    measurement = measurement_from_json(cell["measurement"])
    rows = []
    for name in measurement.variants:
        summary = measurement.summary(name)
        row = {
            "dtype": cell["dtype"],
            "total": cell["total"],
            "variant": name,
            "cpu_ms_per_step": summary["cpu_s_median"] * 1e3 / cell["steps"],
            "wall_ms_per_step": summary["wall_s_median"] * 1e3 / cell["steps"],
        }
        for heading, baseline in STEP_BASELINES:
            if baseline in measurement.variants:
                row[heading] = dataclasses.replace(measurement, baseline=baseline).ratios(name)
        rows.append(row)
    return rows


def step_table(cells: list[dict]) -> str:
    headings = [heading for heading, _ in STEP_BASELINES]
    lines = [
        "| dtype | T | variant | CPU ms/step | wall ms/step | " + " | ".join(headings) + " |",
        "|---|---|---|---|---|" + "---|" * len(headings),
    ]
    for cell in cells:
        for row in step_rows(cell):
            ratios = [spread(row[heading]) if heading in row else "-" for heading in headings]
            lines.append(
                f"| {row['dtype']} | {row['total']:,} | {row['variant']} | {row['cpu_ms_per_step']:.1f} | "
                f"{row['wall_ms_per_step']:.1f} | " + " | ".join(ratios) + " |"
            )
    return "\n".join(lines) + "\n"


def memory_runs(cell: dict) -> dict[str, list[dict]]:
    """The children a prefill cell's memory is read from: its memory children (`bench.long_prefill`), or, in a cell
    measured before they existed, its timed children."""
    memory = cell.get("memory") or {}
    return memory if all(memory.get(case) for case in cell["raw"]) and memory else cell["raw"]


def prefill_table(cells: list[dict]) -> str:
    lines = [
        "| dtype | T | case | CPU s | CPU vs unbounded | peak RSS MiB | growth MiB | growth vs unbounded |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        measurement = measurement_from_json(cell["measurement"])
        probes = memory_runs(cell)
        growth = {case: statistics.median(r["growth_bytes"] for r in runs) for case, runs in probes.items()}
        for case, runs in probes.items():
            summary = measurement.summary(case)
            peak = statistics.median(r["peak_rss_bytes"] for r in runs) / MIB
            base = growth[measurement.baseline]
            relative = f"{growth[case] / base:.2f}" if base > 0 else "-"
            lines.append(
                f"| {cell['dtype']} | {cell['total']:,} | {case} | {summary['cpu_s_median']:.1f} | "
                f"{spread(measurement.ratios(case))} | {peak:.0f} | {growth[case] / MIB:.0f} | {relative} |"
            )
    return "\n".join(lines) + "\n"


def check_line(check: dict) -> str:
    diffs = ", ".join(f"{name} {diff:.2g}" for name, diff in check["max_logit_diff_vs_native"].items())
    same = "same tokens" if check["same_tokens"] else "DIFFERENT tokens"
    return f"- {check['dtype']} T={check['total']:,}: {same}; max |logit difference| to the native window: {diffs}\n"


def conditions(cells: list[dict]) -> str:
    """Each cell's load averages (they change over a long run): one line per cell."""
    lines = []
    for cell in cells:
        m = measurement_from_json(cell["measurement"])
        lines.append(f"- {cell['dtype']} T={cell['total']:,}: {m.conditions()}")
    return "\n".join(lines) + "\n"


def plot_step_cost(cells: list[dict], path: Path) -> None:
    """CPU ms per decode step against T, one panel per dtype, one line per variant (log-log)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = list(dict.fromkeys(cell["dtype"] for cell in cells))
    figure, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 4.8), squeeze=False)
    for axis, dtype in zip(axes[0], dtypes, strict=True):
        rows = [row for cell in cells if cell["dtype"] == dtype for row in step_rows(cell)]
        for variant in VARIANTS:
            points = sorted((row["total"], row["cpu_ms_per_step"]) for row in rows if row["variant"] == variant)
            if points:
                axis.plot(*zip(*points, strict=True), label=variant, **STYLE.get(variant, {}))
        limit = cells[0].get("limit")
        totals = sorted({row["total"] for row in rows})
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xticks(totals, labels=[f"{total / 1024:g}k" for total in totals])
        axis.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        axis.set_xlabel("total length T (tokens)")
        axis.set_ylabel("CPU ms per decode step (median)")
        axis.set_title(f"SmolLM2-135M {dtype}, L={limit}, 1 thread")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    save_figure(figure, path)


def load_results(out: Path) -> dict:
    """The parts found in `out` (results_steps.json, results_prefill.json: each written by its own run, so the
    two can run at once), merged into one results dict."""
    import json

    merged: dict = {"steps": [], "prefill": [], "checks": []}
    for part in ("steps", "prefill"):
        path = out / f"results_{part}.json"
        if path.exists():
            data = json.loads(path.read_text())
            merged[part] = data.get(part, [])
            merged["checks"] += data.get("checks", [])
            merged.setdefault("machine", data.get("machine"))
    return merged


def write_report(results: dict, out: Path) -> str:
    """table.md (+ step_cost.png when there are step cells) from `results`; returns the table's text."""
    out.mkdir(parents=True, exist_ok=True)
    steps, prefill = results.get("steps", []), results.get("prefill", [])
    parts = [f"Machine: {results.get('machine', 'unknown')}.\n"]
    if steps:
        cell = steps[0]
        parts += [
            f"\n## Decode step at total length T (L={cell['limit']}, {cell['sinks']} sinks, {cell['steps']} steps "
            "per call, ratios median [min, max] over the repeats)\n\n",
            step_table(steps),
            "\n" + conditions(steps),
        ]
        plot_step_cost(steps, out / "step_cost.png")
    if results.get("checks"):
        parts += ["\nSame work from the same fill (cachelimit, native window, ideal ring; greedy):\n\n"]
        parts += [check_line(check) for check in results["checks"]]
    if prefill:
        parts += [
            f"\n## Prefill of T tokens (+ 1 generated), L={prefill[0]['limit']}, chunk {prefill[0]['chunk']}\n\n",
            prefill_table(prefill),
            "\n" + conditions(prefill),
        ]
    text = "".join(parts)
    (out / "table.md").write_text(text)
    return text
