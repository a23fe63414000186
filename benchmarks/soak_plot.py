"""The soak benchmark's plot (`benchmarks/soak.py`): KV bytes, memory and ms/token against the generated tokens."""

from __future__ import annotations

from pathlib import Path


def plot(result: dict, path: Path) -> None:
    """Three panels against the generated tokens: KV bytes, memory (RSS, C heap in use), ms per token."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    samples = result["samples"]
    tokens = [sample["tokens"] for sample in samples]
    figure, axes = pyplot.subplots(1, 3, figsize=(15, 4.2))

    def column(key: str, scale: float = 1.0) -> list[float]:
        return [sample[key] * scale for sample in samples]

    series = [
        ("KV cache (MiB)", {"KV bytes": column("kv_bytes", 2**-20)}),
        ("MiB", {"process RSS": column("rss_bytes", 2**-20)}),
        (
            "ms per token",
            {
                "whole step (wall)": column("ms_per_token"),
                "forward + prepare (CPU)": column("model_ms_per_token"),
                "forward + prepare, fastest tenth (CPU)": column("model_ms_p10"),
            },
        ),
    ]
    if None not in [sample["heap_in_use_bytes"] for sample in samples]:
        series[1][1]["C heap in use"] = column("heap_in_use_bytes", 2**-20)
    for axis, (label, lines) in zip(axes, series, strict=True):
        for name, values in lines.items():
            axis.plot(tokens, values, linewidth=1.5, label=name)
        axis.set_xlabel("generated tokens")
        axis.set_ylabel(label)
        axis.set_ylim(bottom=0, top=max(max(values) for values in lines.values()) * 1.15)
        axis.grid(alpha=0.3)
        axis.legend(loc="lower left", fontsize=8)
    load = axes[2].twinx()  # the machine's other work, which the means and the whole step carry
    load.plot(tokens, column("load_average"), color="grey", linestyle=":", linewidth=1)
    load.set_ylabel("1-minute load average (dotted)", color="grey")
    load.set_ylim(bottom=0)
    settings = result["settings"]
    title = f"soak: {settings['tokens']:,} tokens, tiny Llama, cache_limit={settings['cache_limit']}, "
    figure.suptitle(title + f"{settings['sinks']} sinks, greedy, {settings['threads']} thread(s)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
