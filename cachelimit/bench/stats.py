"""Statistics of a benchmark sweep's cells: per-variant CPU-time ratios, long-run flatness, lookups.

A cell is one process in which every variant was timed alternated (`bench.cell`); its `measurement` holds each
variant's steady CPU and wall seconds per repeat. A ratio pairs a variant's call with another variant's call of the
same repeat (`ratios(cell, name, baseline)`), so the [min, max] of the ratios over the repeats is the noise left.
Shared by `report` (targets, JSON) and `tables` (markdown); it imports neither, so they import it one way.
"""

from __future__ import annotations

import dataclasses
import statistics

from .alternate import measurement_from_json

MIB = 1 << 20


def timed_calls(cell: dict, record: dict) -> list[list[float]]:
    """A variant's CPU ms per step of each timed call: its record lists every call, the warm-up rounds first."""
    return record["step_cpu_ms"][-cell["repeats"] :]


def ratios(cell: dict, name: str, baseline: str) -> list[float]:
    """Per repeat: `name`'s steady CPU time / `baseline`'s of the same repeat (both variants of `cell`)."""
    measurement = measurement_from_json(cell["measurement"])
    return dataclasses.replace(measurement, baseline=baseline).ratios(name)


def wall_ratios(cell: dict, name: str, baseline: str) -> list[float]:
    measurement = measurement_from_json(cell["measurement"])
    return dataclasses.replace(measurement, baseline=baseline).wall_ratios(name)


def conditions(cell: dict) -> str:
    return measurement_from_json(cell["measurement"]).conditions()


def summarize(cell: dict) -> list[dict]:
    """One row per variant of one cell: median CPU and wall ms per steady step, the CPU ratios to the cell's
    baseline per repeat, the exact KV bytes at the end and whether its tokens equal cachelimit's."""
    measurement = measurement_from_json(cell["measurement"])
    reference = cell["per_variant"].get("cachelimit", {}).get("tokens_sha1")
    rows = []
    for name, record in cell["per_variant"].items():
        summary = measurement.summary(name)
        steps = max(1, record["steady_steps"])
        same = None if reference is None or name == "cachelimit" else record["tokens_sha1"] == reference
        rows.append({
            "role": cell["role"], "family": cell["family"], "limit": cell["limit"], "batch": cell["batch"],
            "name": name, "variant": record["variant"], "baseline": measurement.baseline,
            "cpu_ms": summary["cpu_s_median"] * 1e3 / steps, "wall_ms": summary["wall_s_median"] * 1e3 / steps,
            "ratios": measurement.ratios(name), "wall_ratio_median": summary["wall_ratio_median"],
            "n": summary["n"], "kv_mib": record["kv_bytes"] / MIB, "layer_class": record["layer_class"],
            "tokens_sha1": record["tokens_sha1"], "same_tokens_as_cachelimit": same,
        })  # fmt: skip
    return rows


def summarize_all(cells: list[dict]) -> list[dict]:
    return [row for cell in cells for row in summarize(cell)]


def long_run_stats(cell: dict) -> list[dict]:
    """Per variant of the long run: flatness, per repeat the median CPU ms of the last 10 % of the steps after the
    window filled over that of the first 10 %; and the KV bytes (exact) a quarter of the way and at the end."""
    fill = max(0, cell["limit"] - cell["prompt_tokens"])
    rows = []
    for name, record in cell["per_variant"].items():
        firsts, lasts = [], []
        for steps in timed_calls(cell, record):
            after = steps[min(fill, len(steps) - 1) :]
            tenth = max(1, len(after) // 10)
            firsts.append(statistics.median(after[:tenth]))
            lasts.append(statistics.median(after[-tenth:]))
        quarter = next(s for s in record["samples"] if s[0] >= cell["new_tokens"] // 4)
        final = record["samples"][-1]
        rows.append({
            "name": name, "variant": record["variant"], "limit": cell["limit"], "new_tokens": cell["new_tokens"],
            "fill_step": fill, "first_tenth_ms": statistics.median(firsts), "last_tenth_ms": statistics.median(lasts),
            "flatness": [last / first for first, last in zip(firsts, lasts, strict=True)],
            "quarter_tokens": quarter[0], "kv_quarter_mib": quarter[1] / MIB, "kv_end_mib": final[1] / MIB,
        })  # fmt: skip
    return rows


def find(rows: list[dict], **where) -> dict | None:
    return next((row for row in rows if all(row.get(key) == value for key, value in where.items())), None)


def find_cell(cells: list[dict], **where) -> dict | None:
    return find(cells, **where)
