"""PNG plots of a benchmark sweep (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import statistics
from pathlib import Path

MIB = 1 << 20
LABELS = {
    "dynamic": "unbounded dynamic",
    "native_sliding": "transformers sliding window (dynamic)",
    "native_static": "transformers sliding window (static)",
    "cachelimit": "cachelimit",
    "cachelimit_sinks": "cachelimit + 4 sinks",
    "ideal": "ideal in-place write",
}
STYLE = {"cachelimit": {"linewidth": 2.2}, "ideal": {"linestyle": "--"}}


def save_figure(figure, path: Path) -> None:
    """Lay out, write (PNG, 110 dpi: every benchmark plot alike) and free a matplotlib figure."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def rolling_median(values: list[float], window: int) -> list[float]:
    """Median of each run of `window` consecutive values (a smoother that ignores the odd descheduled step)."""
    return [statistics.median(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def _curve_runs(results: list[dict]) -> list[dict]:
    """The long runs, or (without them) the grid's batch-1 Mistral runs at its largest L."""
    long_runs = [run for run in results if run["role"] == "long"]
    if long_runs:
        return long_runs
    grid = [run for run in results if run["role"] == "grid" and run["family"] == "mistral" and run["batch"] == 1]
    largest = max((run["limit"] for run in grid), default=None)
    return [run for run in grid if run["limit"] == largest]


def plot_ms_per_token(runs: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 5))
    for run in runs:
        steps = run["step_ms"]
        window = max(1, min(64, len(steps) // 16))
        tokens = range(2, len(steps) + 2)  # step i produces generated token i + 2 (token 1 comes from the prefill)
        label = LABELS[run["variant"]]
        axis.plot(tokens, rolling_median(steps, window), label=label, **STYLE.get(run["variant"], {}))
    if runs:
        run = runs[0]
        axis.axvline(max(0, run["limit"] - run["prompt_tokens"]), color="grey", linestyle=":", label="window full")
        axis.set_title(f"ms per decode step, {run['family']} L={run['limit']} batch {run['batch']} (rolling median)")
    axis.set_xlabel("generated tokens")
    axis.set_ylabel("ms / step")
    axis.set_ylim(bottom=0)
    axis.legend()
    save_figure(figure, path)


def plot_memory(runs: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, (kv_axis, rss_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        tokens = [sample[0] for sample in run["samples"]]
        style = STYLE.get(run["variant"], {})
        kv_axis.plot(tokens, [sample[1] / MIB for sample in run["samples"]], label=LABELS[run["variant"]], **style)
        rss_axis.plot(tokens, [sample[2] / MIB for sample in run["samples"]], label=LABELS[run["variant"]], **style)
    kv_axis.set_title("KV cache bytes held (sum of key/value storages)")
    kv_axis.set_ylabel("MiB")
    rss_axis.set_title("process RSS (one fresh process per variant)")
    rss_axis.set_ylabel("MiB")
    for axis in (kv_axis, rss_axis):
        axis.set_xlabel("generated tokens")
        axis.legend(fontsize=8)
    save_figure(figure, path)


def plot_grid(summaries: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    grid = [s for s in summaries if s["role"] == "grid"]
    families = sorted({s["family"] for s in grid}, key=lambda f: f != "mistral")
    batches = sorted({s["batch"] for s in grid})
    if not grid:
        return
    figure, axes = plt.subplots(
        len(families), len(batches), figsize=(5.5 * len(batches), 4 * len(families)), squeeze=False
    )
    for row, family in enumerate(families):
        for column, batch in enumerate(batches):
            axis = axes[row][column]
            for variant, label in LABELS.items():
                points = sorted(
                    (s["limit"], s)
                    for s in grid
                    if (s["family"], s["batch"], s["variant"]) == (family, batch, variant)
                )
                if points:
                    limits = [limit for limit, _ in points]
                    medians = [s["median_ms"] for _, s in points]
                    spread = [
                        [s["median_ms"] - s["q1_ms"] for _, s in points],
                        [s["q3_ms"] - s["median_ms"] for _, s in points],
                    ]
                    axis.errorbar(
                        limits, medians, yerr=spread, label=label, marker="o", capsize=3, **STYLE.get(variant, {})
                    )
            axis.set_xscale("log", base=2)
            axis.set_title(f"{family}, batch {batch}")
            axis.set_xlabel("cache limit L (window full)")
            axis.set_ylabel("ms / step (median, IQR bars)")
            axis.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=7)
    save_figure(figure, path)


def plot_all(results: list[dict], summaries: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    runs = _curve_runs(results)
    if runs:
        plot_ms_per_token(runs, out / "bench_ms_per_token.png")
        plot_memory(runs, out / "bench_memory.png")
    plot_grid(summaries, out / "bench_grid.png")
