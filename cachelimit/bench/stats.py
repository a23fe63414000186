"""Statistics of benchmark runs: per-cell summaries of the raw per-step times, long-run flatness, lookups.

Shared by `report` (targets, JSON) and `tables` (markdown); it imports neither, so they import it one way.
"""

from __future__ import annotations

import statistics

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
