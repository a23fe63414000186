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


def _curve_cell(cells: list[dict]) -> dict | None:
    """The long run, or (without it) the grid's batch-1 Mistral cell at its largest L."""
    long = next((cell for cell in cells if cell["role"] == "long"), None)
    if long:
        return long
    grid = [c for c in cells if c["role"] == "grid" and c["family"] == "mistral" and c["batch"] == 1]
    return max(grid, key=lambda cell: cell["limit"], default=None)


def median_steps(cell: dict, record: dict) -> list[float]:
    """CPU ms of each decode step, the median over the timed calls (the calls are alternated, so each step's median
    drops a step that a neighbour's burst hit)."""
    from .stats import timed_calls

    return [statistics.median(steps) for steps in zip(*timed_calls(cell, record), strict=True)]


def plot_ms_per_token(cell: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 5))
    for record in cell["per_variant"].values():
        steps = median_steps(cell, record)
        window = max(1, min(64, len(steps) // 16))
        tokens = range(3, len(steps) + 3)  # a call's step i produces generated token i + 3 (see bench.cell)
        label = LABELS[record["variant"]]
        axis.plot(tokens, rolling_median(steps, window), label=label, **STYLE.get(record["variant"], {}))
    axis.axvline(max(0, cell["limit"] - cell["prompt_tokens"]), color="grey", linestyle=":", label="window full")
    title = f"CPU ms per decode step, {cell['family']} L={cell['limit']} batch {cell['batch']}"
    axis.set_title(f"{title} ({cell['repeats']} repeats alternated, rolling median)")
    axis.set_xlabel("generated tokens")
    axis.set_ylabel("CPU ms / step")
    axis.set_ylim(bottom=0)
    axis.legend()
    save_figure(figure, path)


def plot_memory(cell: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, kv_axis = plt.subplots(figsize=(8, 4.5))
    for record in cell["per_variant"].values():
        tokens = [sample[0] for sample in record["samples"]]
        style = STYLE.get(record["variant"], {})
        label = LABELS[record["variant"]]
        kv_axis.plot(tokens, [sample[1] / MIB for sample in record["samples"]], label=label, **style)
    kv_axis.set_title("KV cache bytes held (sum of key/value storages, exact)")
    kv_axis.set_ylabel("MiB")
    kv_axis.set_xlabel("generated tokens")
    kv_axis.legend(fontsize=8)
    save_figure(figure, path)


def plot_grid(cells: list[dict], path: Path) -> None:
    """Per model and batch: each variant's CPU ratio to the cell's baseline against L, median with [min, max]."""
    import matplotlib.pyplot as plt

    from .stats import ratios

    grid = [c for c in cells if c["role"] == "grid"]
    if not grid:
        return
    families = sorted({c["family"] for c in grid}, key=lambda f: f != "mistral")
    batches = sorted({c["batch"] for c in grid})
    figure, axes = plt.subplots(
        len(families), len(batches), figsize=(5.5 * len(batches), 4 * len(families)), squeeze=False
    )
    for row, family in enumerate(families):
        for column, batch in enumerate(batches):
            axis = axes[row][column]
            cells = sorted((c for c in grid if (c["family"], c["batch"]) == (family, batch)), key=lambda c: c["limit"])
            for variant, label in LABELS.items():
                points = [
                    (c["limit"], ratios(c, variant, c["baseline"])) for c in cells if variant in c["per_variant"]
                ]
                if points:
                    medians = [statistics.median(values) for _, values in points]
                    low = [m - min(values) for m, (_, values) in zip(medians, points, strict=True)]
                    high = [max(values) - m for m, (_, values) in zip(medians, points, strict=True)]
                    limits = [limit for limit, _ in points]
                    axis.errorbar(limits, medians, yerr=[low, high], label=label, marker="o", capsize=3,
                                  **STYLE.get(variant, {}))  # fmt: skip
            axis.set_xscale("log", base=2)
            axis.set_title(f"{family}, batch {batch}")
            axis.set_xlabel("cache limit L (window full)")
            axis.set_ylabel(f"CPU time / {grid[0]['baseline']}'s, same repeat (median, [min, max])")
    axes[0][0].legend(fontsize=7)
    save_figure(figure, path)


def plot_all(cells: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    cell = _curve_cell(cells)
    if cell:
        plot_ms_per_token(cell, out / "bench_ms_per_token.png")
        plot_memory(cell, out / "bench_memory.png")
    plot_grid(cells, out / "bench_grid.png")
