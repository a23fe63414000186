"""The budget scenario's report: a table, a plot, the raw JSON and the headline ratios.

Input: one result per run of `bench.budget_run` (the planned job and what it measured), plus the planned jobs of
which not even one row fits (reported as such). The fit is checked against the caches: every row of the table says
whether the KV bytes a run held equal the bytes `bench.budget_fit` computed before the run.
"""

from __future__ import annotations

import json
from pathlib import Path

MIB = 2**20


def _cache(job: dict) -> str:
    if job["limit"] is None:
        return "unbounded"
    return f"`cache_limit={job['limit']}`" + (f", {job['sinks']} sinks" if job["sinks"] else "")


def _group(job: dict) -> tuple:
    return (job["model"], job["mode"])


def headlines(results: list[dict], unfit: list[dict]) -> list[dict]:
    """Per model and mode: the rows and tokens/s unbounded and bounded, and their ratios."""
    out = []
    for group in sorted({_group(job) for job in results + unfit}):
        runs = {job["limit"] is None: job for job in results + unfit if _group(job) == group}
        dense, bounded = runs.get(True), runs.get(False)
        if dense is None or bounded is None:
            continue
        entry = {"model": group[0], "mode": group[1], "rows_unbounded": dense["rows"], "rows_bounded": bounded["rows"]}
        entry.update(limit=bounded["limit"], budget_bytes=bounded["budget"], new_tokens=bounded["new_tokens"])
        speed = (dense.get("tokens_per_second"), bounded.get("tokens_per_second"))
        entry.update(tokens_per_second_unbounded=speed[0], tokens_per_second_bounded=speed[1])
        cpu = (dense.get("tokens_per_cpu_second"), bounded.get("tokens_per_cpu_second"))
        entry["tokens_per_cpu_second_ratio"] = cpu[1] / cpu[0] if cpu[0] and cpu[1] else None
        entry["rows_ratio"] = bounded["rows"] / dense["rows"] if dense["rows"] else None
        entry["tokens_per_second_ratio"] = speed[1] / speed[0] if speed[0] and speed[1] else None
        out.append(entry)
    return out


def headline_text(entry: dict) -> str:
    what = "batch" if entry["mode"] == "batch" else "num_beams"
    budget = f"{entry['budget_bytes'] / MIB:,.0f} MiB of KV and {entry['new_tokens']:,} new tokens"
    dense = f"{what} {entry['rows_unbounded']} unbounded" if entry["rows_unbounded"] else "no row fits unbounded"
    text = f"{entry['model']}, {budget}: {dense} vs {entry['rows_bounded']} with cache_limit={entry['limit']}"
    if entry["tokens_per_second_ratio"]:
        text += (
            f", {entry['tokens_per_second_ratio']:.1f}x the aggregate tokens/s "
            f"({entry['tokens_per_second_bounded']:.1f} vs {entry['tokens_per_second_unbounded']:.1f})"
        )
    if entry.get("tokens_per_cpu_second_ratio"):
        text += f", {entry['tokens_per_cpu_second_ratio']:.1f}x per CPU second"
    return text


def table(results: list[dict], unfit: list[dict]) -> str:
    lines = [
        "| model | rows are | cache | rows | KV per row, fitted | KV held, fitted | KV held, measured | as fitted "
        "| peak RSS | RSS added | tokens/s | tokens per CPU s | time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for job in sorted(results + unfit, key=lambda j: (_group(j), j["limit"] is not None)):
        common = (
            f"| {job['model']} | {'batch' if job['mode'] == 'batch' else 'beams'} | {_cache(job)} | {job['rows']} | "
            f"{job['predicted_row_bytes'] / MIB:,.2f} MiB | {job['predicted_kv_bytes'] / MIB:,.1f} MiB | "
        )
        if "kv_bytes_end" not in job:
            lines.append(common + "not run: no row fits | | | | | | |")
            continue
        fitted = job["kv_bytes_end"] == job["predicted_kv_bytes"] == job["kv_bytes_most"]
        added = (job["peak_rss_bytes"] - job["rss_before_bytes"]) / MIB
        lines.append(
            common + f"{job['kv_bytes_end'] / MIB:,.1f} MiB | {'yes' if fitted else '**NO**'} | "
            f"{job['peak_rss_bytes'] / MIB:,.0f} MiB | {added:,.0f} MiB | {job['tokens_per_second']:.1f} | "
            f"{job.get('tokens_per_cpu_second', float('nan')):.1f} | {job['seconds']:.0f} s |"
        )
    return "\n".join(lines)


def plot(results: list[dict], unfit: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    groups = sorted({_group(job) for job in results + unfit})
    figure, (rows_axes, speed_axes) = pyplot.subplots(1, 2, figsize=(11, 4.5), dpi=100)
    width = 0.38
    for offset, bounded in ((-width / 2, False), (width / 2, True)):
        jobs = [next((j for j in results + unfit if _group(j) == g and (j["limit"] is not None) == bounded), None)
                for g in groups]  # fmt: skip
        label = "unbounded" if not bounded else next((_cache(j) for j in jobs if j), "bounded").strip("`")
        positions = [index + offset for index in range(len(groups))]
        rows = [job["rows"] if job else 0 for job in jobs]
        speed = [job.get("tokens_per_second", 0.0) if job else 0.0 for job in jobs]
        bars = rows_axes.bar(positions, rows, width, label=label)
        rows_axes.bar_label(bars, fontsize=8)
        bars = speed_axes.bar(positions, speed, width, label=label)
        speed_axes.bar_label(bars, fmt="%.1f", fontsize=8)
    names = [f"{model}\n{'batch' if mode == 'batch' else 'num_beams'}" for model, mode in groups]
    budget = (results + unfit)[0]
    title = f"{budget['budget'] / MIB:,.0f} MiB of KV, {budget['new_tokens']:,} new tokens per row"
    for axes, label in ((rows_axes, "rows that fit (batch or num_beams)"), (speed_axes, "aggregate tokens/s")):
        axes.set_xticks(range(len(groups)), names)
        axes.set_ylabel(label)
        axes.grid(axis="y", alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def write_report(records: list[dict], out: Path) -> str:
    """Write budget.json, budget_table.md and budget.png from the journal's records (runs, and planned caches of
    which no row fits); return the table and headlines as text."""
    results = [record for record in records if "kv_bytes_end" in record]
    unfit = [record for record in records if "kv_bytes_end" not in record]
    if not records:
        return "no budget runs in the journal"
    heads = headlines(results, unfit)
    text = table(results, unfit) + "\n\n" + "\n".join(f"- {headline_text(entry)}" for entry in heads) + "\n"
    (out / "budget_table.md").write_text(text)
    (out / "budget.json").write_text(json.dumps({"headlines": heads, "runs": results, "unfit": unfit}) + "\n")
    plot(results, unfit, out / "budget.png")
    return text
