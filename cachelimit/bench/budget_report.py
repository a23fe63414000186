"""The budget scenario's report: a table, a plot, the raw JSON and the headline ratios.

Input: one result per run of `bench.budget_run` (the planned job and what it measured), plus the planned jobs of
which not even one row fits (reported as such). The fit is checked against the caches: every row of the table says
whether the KV bytes a run held equal the bytes `bench.budget_fit` computed before the run.

Repeats (issue 28's method, for runs that each need a fresh process): repeat r of a (model, mode) ran the unbounded
cache and then `cache_limit=L` back to back, so a ratio pairs the bounded run with the unbounded run of the same
repeat, and what drifts between repeats (load, clock, page cache) cancels as far as it can. The headline gives the
ratio of tokens per CPU second (the fair figure on a shared machine) as median [min, max] over the n repeats that
have both runs, the wall-clock tokens/s ratio beside it the same way, and the range of the 1-minute load averages
the runs recorded before and after generating. The table keeps one row per run, with its repeat, not a median of
the repeats: the KV bytes are checked against the fit run by run, and a peak RSS is one process's figure (a median
would hide a bad run). A cache of which no row fits is one row: it is the same in every repeat.

A journal record written before repeats existed has no `repeat`; it counts as repeat 1 (`repeat_of`), which is
what it was: the old plan ran each (model, mode) unbounded then bounded once, the new plan's first repeat.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .alternate import spread

MIB = 2**20
LOADS = ("load_average_before", "load_average_after")


def repeat_of(job: dict) -> int:
    """A record's repeat, from 1; a record from before repeats existed (no `repeat`) is repeat 1."""
    return 1 if job.get("repeat") is None else job["repeat"]


def _cache(job: dict) -> str:
    if job["limit"] is None:
        return "unbounded"
    return f"`cache_limit={job['limit']}`" + (f", {job['sinks']} sinks" if job["sinks"] else "")


def _group(job: dict) -> tuple:
    return (job["model"], job["mode"])


def paired_ratios(runs: list[dict], key: str) -> list[tuple[int, float]]:
    """(repeat, bounded / unbounded `key`) for every repeat in which both caches of one (model, mode) have it."""
    by_repeat: dict[int, dict[bool, dict]] = {}
    for job in runs:
        by_repeat.setdefault(repeat_of(job), {})[job["limit"] is None] = job
    pairs = [(repeat, pair.get(True, {}).get(key), pair.get(False, {}).get(key)) for repeat, pair in by_repeat.items()]
    return sorted((repeat, bounded / dense) for repeat, dense, bounded in pairs if dense and bounded)


def summary(ratios: list[float]) -> dict | None:
    """median, min, max and n of per-repeat ratios (None without any)."""
    if not ratios:
        return None
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}


def load_range(runs: list[dict]) -> list[float] | None:
    """[lowest, highest] 1-minute load average recorded before or after any of the runs (None if none recorded)."""
    loads = [job[key] for job in runs for key in LOADS if job.get(key) is not None]
    return [min(loads), max(loads)] if loads else None


def headlines(results: list[dict], unfit: list[dict]) -> list[dict]:
    """Per model and mode: the rows unbounded and bounded, the per-repeat ratios of tokens per CPU second and of
    wall-clock tokens/s (bounded / unbounded, paired by repeat) with their median, min and max, the load range."""
    out = []
    for group in sorted({_group(job) for job in results + unfit}):
        runs = [job for job in results + unfit if _group(job) == group]
        dense = next((job for job in runs if job["limit"] is None), None)
        bounded = next((job for job in runs if job["limit"] is not None), None)
        if dense is None or bounded is None:
            continue
        entry = {"model": group[0], "mode": group[1], "rows_unbounded": dense["rows"], "rows_bounded": bounded["rows"]}
        entry.update(limit=bounded["limit"], budget_bytes=bounded["budget"], new_tokens=bounded["new_tokens"])
        entry["rows_ratio"] = bounded["rows"] / dense["rows"] if dense["rows"] else None
        for key in ("tokens_per_cpu_second", "tokens_per_second"):
            pairs = paired_ratios(runs, key)
            entry[f"{key}_repeats"] = [repeat for repeat, _ in pairs]
            entry[f"{key}_ratios"] = [ratio for _, ratio in pairs]
            entry[f"{key}_ratio"] = summary(entry[f"{key}_ratios"])
        entry["load_average_range"] = load_range([job for job in runs if "kv_bytes_end" in job])
        out.append(entry)
    return out


def _repeats(n: int) -> str:
    return f"{n} repeat" + ("" if n == 1 else "s")


def headline_text(entry: dict) -> str:
    what = "batch" if entry["mode"] == "batch" else "num_beams"
    budget = f"{entry['budget_bytes'] / MIB:,.0f} MiB of KV and {entry['new_tokens']:,} new tokens"
    dense = f"{what} {entry['rows_unbounded']} unbounded" if entry["rows_unbounded"] else "no row fits unbounded"
    text = f"{entry['model']}, {budget}: {dense} vs {entry['rows_bounded']} with cache_limit={entry['limit']}"
    cpu, wall = entry["tokens_per_cpu_second_ratio"], entry["tokens_per_second_ratio"]
    if cpu or wall:
        n = (cpu or wall)["n"]
        figures = [f"{spread(entry['tokens_per_cpu_second_ratios'])} per CPU second" if cpu else "no CPU time"]
        if wall:
            other = f" (over {_repeats(wall['n'])})" if wall["n"] != n else ""
            figures.append(f"{spread(entry['tokens_per_second_ratios'])} in wall-clock tokens/s{other}")
        text += f"; bounded / unbounded, median [min, max] over {_repeats(n)}: {', '.join(figures)}"
    if entry["load_average_range"]:
        text += "; load average {:.2f}-{:.2f}".format(*entry["load_average_range"])
    elif cpu or wall:
        text += "; load average not recorded"
    return text


def _load(job: dict) -> str:
    before, after = job.get(LOADS[0]), job.get(LOADS[1])
    return "" if before is None or after is None else f"{before:.2f} / {after:.2f}"


def table(results: list[dict], unfit: list[dict]) -> str:
    """One row per run (by model, mode, repeat, unbounded first), one per cache of which no row fits."""
    lines = [
        "| model | rows are | cache | repeat | rows | KV per row, fitted | KV held, fitted | KV held, measured "
        "| as fitted | peak RSS | RSS added | tokens/s | tokens per CPU s | time | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    unfit = list({(_group(job), job["limit"]): job for job in unfit}.values())
    order = sorted(results, key=lambda j: (_group(j), repeat_of(j), j["limit"] is not None))
    for job in sorted(unfit, key=lambda j: (_group(j), j["limit"] is not None)) + order:
        repeat = "all" if "kv_bytes_end" not in job else repeat_of(job)
        common = (
            f"| {job['model']} | {'batch' if job['mode'] == 'batch' else 'beams'} | {_cache(job)} | {repeat} | "
            f"{job['rows']} | {job['predicted_row_bytes'] / MIB:,.2f} MiB | {job['predicted_kv_bytes'] / MIB:,.1f} MiB | "
        )
        if "kv_bytes_end" not in job:
            lines.append(common + "not run: no row fits | | | | | | | |")
            continue
        fitted = job["kv_bytes_end"] == job["predicted_kv_bytes"] == job["kv_bytes_most"]
        added = (job["peak_rss_bytes"] - job["rss_before_bytes"]) / MIB
        lines.append(
            common + f"{job['kv_bytes_end'] / MIB:,.1f} MiB | {'yes' if fitted else '**NO**'} | "
            f"{job['peak_rss_bytes'] / MIB:,.0f} MiB | {added:,.0f} MiB | {job['tokens_per_second']:.1f} | "
            f"{job.get('tokens_per_cpu_second', float('nan')):.1f} | {job['seconds']:.0f} s | {_load(job)} |"
        )
    return "\n".join(lines)


def _bars(axes, positions, values: list[list[float]], width: float, label: str, fmt: str) -> None:
    """Bars at the median of each list of values (0 if empty), whiskers from its min to its max where any list has
    more than one value."""
    medians = [statistics.median(v) if v else 0.0 for v in values]
    low = [m - min(v) if v else 0.0 for m, v in zip(medians, values, strict=True)]
    high = [max(v) - m if v else 0.0 for m, v in zip(medians, values, strict=True)]
    whiskers = {"yerr": [low, high], "capsize": 3} if any(len(v) > 1 for v in values) else {}
    bars = axes.bar(positions, medians, width, label=label, **whiskers)
    axes.bar_label(bars, fmt=fmt, fontsize=8)


def plot(results: list[dict], unfit: list[dict], path: Path) -> None:
    """Rows that fit, tokens per CPU second and wall-clock tokens/s per model and mode (median, [min, max])."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    groups = sorted({_group(job) for job in results + unfit})
    figure, panels = pyplot.subplots(1, 3, figsize=(15, 4.5), dpi=100)
    width = 0.38
    for offset, bounded in ((-width / 2, False), (width / 2, True)):
        runs = [[j for j in results + unfit if _group(j) == g and (j["limit"] is not None) == bounded] for g in groups]
        label = "unbounded" if not bounded else next((_cache(j[0]) for j in runs if j), "bounded").strip("`")
        positions = [index + offset for index in range(len(groups))]
        _bars(panels[0], positions, [[j[0]["rows"]] if j else [] for j in runs], width, label, "%d")
        for axes, key in zip(panels[1:], ("tokens_per_cpu_second", "tokens_per_second"), strict=True):
            values = [[job[key] for job in jobs if job.get(key)] for jobs in runs]
            _bars(axes, positions, values, width, label, "%.1f")
    names = [f"{model}\n{'batch' if mode == 'batch' else 'num_beams'}" for model, mode in groups]
    budget = (results + unfit)[0]
    title = (
        f"{budget['budget'] / MIB:,.0f} MiB of KV, {budget['new_tokens']:,} new tokens per row; "
        "bars: median over the repeats, whiskers: [min, max]"
    )
    labels = ("rows that fit (batch or num_beams)", "aggregate tokens per CPU second", "aggregate tokens/s (wall)")
    for axes, label in zip(panels, labels, strict=True):
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
