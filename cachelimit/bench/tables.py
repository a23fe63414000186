"""Markdown tables of a benchmark sweep (printed at the end of a run and written to table.md)."""

from __future__ import annotations

from .stats import find

SHORT = {
    "dynamic": "dynamic",
    "native_sliding": "native sliding",
    "native_static": "native static",
    "cachelimit": "cachelimit",
    "cachelimit_sinks": "cachelimit+4 sinks",
    "ideal": "ideal",
}


def _fmt(value, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def grid_table(summaries: list[dict]) -> str:
    """Median ms per step (IQR) per cell and variant; GPT-2 has no native sliding window (n/a)."""
    grid = [s for s in summaries if s["role"] == "grid"]
    variants = [v for v in SHORT if any(s["variant"] == v for s in grid)]
    cells = sorted({(s["family"], s["limit"], s["batch"]) for s in grid}, key=lambda c: (c[0] != "mistral", c[1:]))
    rows = []
    for family, limit, batch in cells:
        found = {v: find(grid, family=family, limit=limit, batch=batch, variant=v) for v in variants}
        row = [family, str(limit), str(batch)]
        row += [f"{found[v]['median_ms']:.1f} ({found[v]['iqr_ms']:.1f})" if found[v] else "n/a" for v in variants]
        mine = found.get("cachelimit")
        for other in ("native_sliding", "ideal"):
            theirs = found.get(other)
            row.append(_fmt(mine["median_ms"] / theirs["median_ms"]) if mine and theirs else "n/a")
        rows.append(row)
    header = ["model", "L", "batch", *(SHORT[v] for v in variants), "cachelimit / native", "cachelimit / ideal"]
    return _table(header, rows)


def detail_table(summaries: list[dict]) -> str:
    rows = []
    for s in summaries:
        cell = {key: s[key] for key in ("role", "family", "limit", "batch")}
        ref = find(summaries, variant="cachelimit", **cell)
        same = "n/a" if ref is None or ref is s else ("yes" if ref["tokens_sha1"] == s["tokens_sha1"] else "no")
        repeats = ", ".join(f"{value:.2f}" for value in s["repeat_medians_ms"])
        rows.append(
            [s["role"], s["family"], str(s["limit"]), str(s["batch"]), SHORT[s["variant"]], str(s["layer_class"])]
            + [f"{s['median_ms']:.2f}", f"{s['iqr_ms']:.2f}", repeats, f"{s['tokens_per_s']:.1f}"]
            + [f"{s['kv_mib']:.1f}", f"{s['peak_rss_mib']:.0f}", f"{s['prefill_s']:.2f}", same]
        )
    header = ["run", "model", "L", "batch", "variant", "cache layer", "ms/step median", "IQR", "median per repeat"]
    header += ["tokens/s", "KV MiB", "peak RSS MiB", "prefill s", "same tokens as cachelimit"]
    return _table(header, rows)


def long_table(long_stats: list[dict]) -> str:
    rows = [
        [SHORT[s["variant"]], f"{s['first_tenth_ms']:.2f}", f"{s['last_tenth_ms']:.2f}", f"{s['flatness_ratio']:.3f}"]
        + [f"{s['hwm_quarter_mib']:.0f}", f"{s['hwm_end_mib']:.0f}", f"{s['rss_growth'] * 100:+.1f} %"]
        + [f"{s['kv_quarter_mib']:.1f}", f"{s['kv_end_mib']:.1f}"]
        for s in long_stats
    ]
    header = ["variant", "ms/step, first 10 % after fill", "last 10 %", "last / first", "peak RSS MiB at 1/4"]
    header += ["at end", "growth", "KV MiB at 1/4", "at end"]
    return _table(header, rows)


def targets_table(rows: list[dict]) -> str:
    cells = [
        [row["target"], _fmt(row["measured"], ".3f"), "n/a" if row["met"] is None else ("yes" if row["met"] else "NO")]
        + [row["detail"]]
        for row in rows
    ]
    return _table(["target", "measured", "met", "from"], cells)


def report_markdown(summaries, long_stats, rows, meta, settings) -> str:
    threads = meta["torch_threads"]
    sections = [f"## Targets (measured in one sweep; {meta['usable_cores']} cores, torch threads {threads})"]
    sections.append(targets_table(rows))
    if any(s["role"] == "grid" for s in summaries):
        sections += ["## Median ms per decode step (IQR), window full (prompt of L tokens)", grid_table(summaries)]
    if long_stats:
        title = f"## Long run ({long_stats[0]['new_tokens']} tokens, L={settings['long_limit']}, batch 1)"
        sections += [title, long_table(long_stats)]
    return "\n\n".join([*sections, "## All runs", detail_table(summaries)])
