"""Markdown tables of a benchmark sweep (printed at the end of a run and written to table.md).

Every time is a CPU-time ratio between variants of one cell (one process, variants alternated), printed as
median [min, max] over the repeats, with the wall-clock ratio beside it and the load average of the cell.
"""

from __future__ import annotations

import statistics

from .alternate import spread
from .stats import conditions, find, ratios, wall_ratios

SHORT = {
    "dynamic": "dynamic",
    "native_sliding": "native sliding",
    "native_static": "native static",
    "cachelimit": "cachelimit",
    "cachelimit_sinks": "cachelimit+4 sinks",
    "ideal": "ideal",
}


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _load(cell: dict) -> str:
    return f"{cell['measurement']['load_before'][0]:.1f}-{cell['measurement']['load_after'][0]:.1f}"


def _ratio(cell: dict, name: str, baseline: str) -> str:
    names = cell["per_variant"]
    return spread(ratios(cell, name, baseline)) if name in names and baseline in names else "n/a"


def grid_table(cells: list[dict]) -> str:
    """Per cell: every variant's CPU time per step / the ideal cache's of the same repeat, cachelimit / native
    sliding, the ideal's CPU ms per step (the scale) and cachelimit's wall ratio; GPT-2 has no native window."""
    grid = sorted(
        (c for c in cells if c["role"] == "grid"), key=lambda c: (c["family"] != "mistral", c["limit"], c["batch"])
    )
    baseline = grid[0]["baseline"] if grid else "ideal"
    variants = [v for v in SHORT if v != baseline and any(v in c["per_variant"] for c in grid)]
    rows = []
    for cell in grid:
        base = cell["baseline"]
        row = [cell["family"], str(cell["limit"]), str(cell["batch"])]
        row += [_ratio(cell, v, base) for v in variants]
        row.append(_ratio(cell, "cachelimit", "native_sliding"))
        cpu = cell["measurement"]["summary"][base]["cpu_s_median"] * 1e3 / cell["per_variant"][base]["steady_steps"]
        row.append(f"{cpu:.1f}")
        names = cell["per_variant"]
        wall = statistics.median(wall_ratios(cell, "cachelimit", base)) if "cachelimit" in names else None
        row += ["n/a" if wall is None else f"{wall:.2f}", str(cell["repeats"]), _load(cell)]
        rows.append(row)
    header = ["model", "L", "batch", *(f"{SHORT[v]} / {SHORT[baseline]}" for v in variants)]
    header += ["cachelimit / native sliding", f"{SHORT[baseline]} CPU ms/step", "cachelimit wall ratio", "n", "load"]
    return _table(header, rows)


def detail_table(cells: list[dict], summaries: list[dict]) -> str:
    rows = []
    for s in summaries:
        cell = find(cells, role=s["role"], family=s["family"], limit=s["limit"], batch=s["batch"])
        same = "n/a" if s["same_tokens_as_cachelimit"] is None else ("yes" if s["same_tokens_as_cachelimit"] else "no")
        rows.append(
            [s["role"], s["family"], str(s["limit"]), str(s["batch"]), s["name"], str(s["layer_class"])]
            + [f"{s['cpu_ms']:.2f}", f"{s['wall_ms']:.2f}", f"{spread(s['ratios'])} vs {s['baseline']}"]
            + [f"{s['wall_ratio_median']:.2f}", f"{s['kv_mib']:.2f}", same, str(s["n"]), _load(cell)]
        )
    header = ["run", "model", "L", "batch", "variant", "cache layer", "CPU ms/step", "wall ms/step"]
    header += ["CPU ratio median [min, max]", "wall ratio", "KV MiB at end", "same tokens as cachelimit", "n", "load"]
    return _table(header, rows)


def long_table(long_stats: list[dict]) -> str:
    rows = [
        [s["name"], f"{s['first_tenth_ms']:.2f}", f"{s['last_tenth_ms']:.2f}", spread(s["flatness"])]
        + [f"{s['kv_quarter_mib']:.2f}", f"{s['kv_end_mib']:.2f}"]
        for s in long_stats
    ]
    header = ["variant", "CPU ms/step, first 10 % after fill", "last 10 %", "last / first, median [min, max]"]
    header += ["KV MiB at 1/4", "at end"]
    return _table(header, rows)


def targets_table(rows: list[dict]) -> str:
    cells = []
    for row in rows:
        measured = "n/a" if row["measured"] is None else row.get("spread") or f"{row['measured']:.3f}"
        met = "n/a" if row["met"] is None else ("yes" if row["met"] else "NO")
        cells.append([row["target"], measured, met, row["detail"]])
    return _table(["target", "measured, median [min, max]", "met (median)", "from"], cells)


def report_markdown(cells, summaries, long_stats, rows, meta, settings) -> str:
    sections = [
        f"Machine: {meta['cpu']}, {meta['usable_cores']} usable cores, torch {meta['torch']}, transformers "
        f"{meta['transformers']}, torch threads {meta['torch_threads']}; {meta['date']}; command: `{meta['command']}`",
        "## Targets (measured in one sweep; each ratio pairs calls of the same process and repeat)",
        targets_table(rows),
    ]
    grid = [c for c in cells if c["role"] == "grid"]
    if grid:
        sections += [
            "## CPU time per decode step relative to the ideal cache, window full (prompt of L tokens)",
            grid_table(cells),
            "Each cell: one process, variants alternated in rotating order; the ratio is a variant's CPU time over "
            "its steady decode steps / the baseline's in the same repeat, median [min, max] over the repeats. "
            "load: 1-minute load average before-after the cell.",
        ]
    long = next((c for c in cells if c["role"] == "long"), None)
    if long_stats and long:
        title = f"## Long run ({long['new_tokens']} tokens, L={long['limit']}, batch 1)"
        sections += [title, long_table(long_stats), conditions(long)]
    return "\n\n".join([*sections, "## All variants", detail_table(cells, summaries)])
