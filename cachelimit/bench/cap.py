"""The "cap" scenario (issue 8): a `cache_limit` far above the sequence length is a safety cap and must cost what
the unbounded cache costs, in time per token and in KV bytes at every step.

One cell (Mistral-shaped, batch 1, a 32-token prompt), its variants alternated in one process (`bench.cell`): the
unbounded `DynamicCache`, cachelimit with `cache_limit` = 100 x the sequence length, with `cache_limit=2**30`, and
with a limit crossed half-way through the run (the ring grows, then stays at L + 1 slots). Times are CPU-time
ratios to the unbounded cache's call of the same repeat, median [min, max]; KV bytes are read after every step and
compared exactly.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from .alternate import spread
from .plots import median_steps, rolling_median, save_figure
from .stats import MIB, ratios, wall_ratios

CAP_PROMPT = 32
CAP_FACTOR = 100
HUGE_LIMIT = 2**30
TIME_BOUND, BYTES_BOUND = 1.10, 2.0


def cap_variants(new_tokens: int) -> list[tuple[str, int, str]]:
    """(variant, cache limit, label) of each run of the scenario; the unbounded run's limit is 0 (none)."""
    length = CAP_PROMPT + new_tokens
    crossed = CAP_PROMPT + new_tokens // 2
    return [
        ("dynamic", 0, "unbounded DynamicCache"),
        ("cachelimit", CAP_FACTOR * length, f"cache_limit={CAP_FACTOR * length:,} ({CAP_FACTOR}x the length)"),
        ("cachelimit", HUGE_LIMIT, "cache_limit=2**30"),
        ("cachelimit", crossed, f"cache_limit={crossed} (crossed after {crossed - CAP_PROMPT} tokens)"),
    ]


def cap_stats(cells: list[dict]) -> list[dict]:
    """Per bounded variant of the cap cell: CPU ratios to the unbounded call of the same repeat, the wall ratio
    beside, and the largest KV-bytes ratio over every step (exact byte counts)."""
    cell = next((c for c in cells if c["role"] == "cap"), None)
    if cell is None:
        return []
    base = cell["baseline"]
    records = cell["per_variant"]
    base_bytes = {sample[0]: sample[1] for sample in records[base]["samples"]}
    summary = cell["measurement"]["summary"]
    rows = []
    for name, record in records.items():
        if name == base:
            continue
        byte_ratios = [s[1] / base_bytes[s[0]] for s in record["samples"] if s[0] in base_bytes]
        steps = record["steady_steps"]
        rows.append({
            "label": name, "limit": record["limit"], "new_tokens": cell["new_tokens"],
            "cpu_ms": summary[name]["cpu_s_median"] * 1e3 / steps,
            "base_cpu_ms": summary[base]["cpu_s_median"] * 1e3 / records[base]["steady_steps"],
            "ratios": ratios(cell, name, base), "wall_ratio_median": statistics.median(wall_ratios(cell, name, base)),
            "max_bytes_ratio": max(byte_ratios), "end_bytes": record["kv_bytes"], "base_end_bytes": records[base]["kv_bytes"],
            "crossed": record["limit"] < cell["prompt_tokens"] + cell["new_tokens"], "n": cell["repeats"],
        })  # fmt: skip
    return rows


def cap_targets(rows: list[dict]) -> list[dict]:
    """Issue 8's cap targets as measured rows (the crossed limit is reported in the table, with no target)."""
    targets = []
    for row in (row for row in rows if not row["crossed"]):
        median = statistics.median(row["ratios"])
        detail = (
            f"{row['cpu_ms']:.2f} / {row['base_cpu_ms']:.2f} CPU ms per step (medians), n={row['n']}; wall ratio "
            f"{row['wall_ratio_median']:.2f}"
        )
        targets.append({
            "target": f"cap, {row['label']}: CPU time per token / unbounded <= {TIME_BOUND:.2f}",
            "measured": median, "spread": spread(row["ratios"]), "ratios": row["ratios"],
            "met": median <= TIME_BOUND, "detail": detail,
        })  # fmt: skip
        targets.append({
            "target": f"cap, {row['label']}: KV bytes / unbounded <= {BYTES_BOUND:.0f} at every step (exact)",
            "measured": row["max_bytes_ratio"], "met": row["max_bytes_ratio"] <= BYTES_BOUND,
            "detail": f"at the end {row['end_bytes'] / MIB:.2f} MiB / {row['base_end_bytes'] / MIB:.2f} MiB",
        })  # fmt: skip
    return targets


def cap_table(rows: list[dict]) -> str:
    header = ["cache limit", "CPU ms/step", "unbounded CPU ms/step", "CPU ratio median [min, max]", "wall ratio"]
    header += ["max KV bytes ratio over steps", "KV MiB at end", "unbounded KV MiB at end", "n"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["label"], f"{row['cpu_ms']:.2f}", f"{row['base_cpu_ms']:.2f}", spread(row["ratios"])]
        cells += [f"{row['wall_ratio_median']:.2f}", f"{row['max_bytes_ratio']:.3f}"]
        cells += [f"{row['end_bytes'] / MIB:.3f}", f"{row['base_end_bytes'] / MIB:.3f}", str(row["n"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_cap(cells: list[dict], path: Path) -> None:
    """CPU ms per step (median over the repeats at each step, then a rolling median) and KV MiB vs tokens."""
    import matplotlib.pyplot as plt

    cell = next((c for c in cells if c["role"] == "cap"), None)
    if cell is None:
        return
    figure, (time_axis, kv_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, record in cell["per_variant"].items():
        per_step = median_steps(cell, record)
        style = {"linestyle": "--"} if record["variant"] == "dynamic" else {}
        tokens = range(3, len(per_step) + 3)  # the call's step i produces generated token i + 3
        time_axis.plot(tokens, rolling_median(per_step, 9), label=name, **style)
        samples = record["samples"]
        kv_axis.plot([s[0] for s in samples], [s[1] / MIB for s in samples], label=name, **style)
    time_axis.set_title(f"CPU ms per decode step ({cell['repeats']} repeats alternated, rolling median)")
    time_axis.set_ylabel("CPU ms / step")
    time_axis.set_ylim(bottom=0)
    kv_axis.set_title("KV cache bytes held (allocated storage)")
    kv_axis.set_ylabel("MiB")
    for axis in (time_axis, kv_axis):
        axis.set_xlabel("generated tokens")
        axis.legend(fontsize=8)
    save_figure(figure, path)
