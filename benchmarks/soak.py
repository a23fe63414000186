"""Soak test: one long bounded generation on the built-in tiny model, checked for flat memory and speed.

    python benchmarks/soak.py                              # 100,000 tokens, cache_limit=256, 4 sinks, greedy
    python benchmarks/soak.py --tokens 2000 --every 200    # a quick look

Why: the unit tests check every step of short runs exactly; only a long run shows a slow leak (a tensor, a Python
list or a mask that grows with the sequence) or a per-step cost that creeps up. One `model.generate` call decodes
`--tokens` tokens (the user's path: transformers keeps the growing `input_ids` and attention mask, cachelimit the
bounded cache), and every `--every` tokens a sample records the process's current RSS (`/proc/self/statm`), the KV
bytes the cache holds (read from the cache object after every forward, `cachelimit.live.KVMeter`), and the wall and
CPU milliseconds per token since the previous sample.

Checks, after the window is full (the prompt plus the generated tokens exceed `cache_limit`):
- KV bytes are exactly `layers x (2 x (L + 1) + S) x kv_heads x head_dim x 4` after every token (README "Memory
  held": L + 1 slots of keys and values, plus S un-rotated sink keys), so they are also constant;
- RSS grows by less than `--rss-tolerance` (2 %) from the sample at 10 % of the tokens to any later sample;
- the median wall ms/token of the last decile of samples over that of the first decile lies in [0.9, 1.1].
Writes `soak.json` (settings, every sample, the checks) and `soak.png` to `--out`; exits 1 if a check fails.
Not run in CI (minutes); `tests/test_soak.py` runs the logic on a few thousand tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT = "The soak test decodes for a long time and watches the memory stay flat. "
TIME_RATIO = (0.9, 1.1)
FLOAT32 = 4


def current_rss() -> int:
    """Resident bytes now (not the peak: a leak shows as growth); Linux's /proc, else the peak as a fallback."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def heap_in_use() -> int | None:
    """Bytes the C heap hands out now (glibc's `mallinfo2`: small blocks plus mmapped ones), None elsewhere: tells a
    growing tensor (in use grows) from allocator fragmentation (RSS grows, in use does not)."""
    try:
        import ctypes

        class MallInfo2(ctypes.Structure):
            names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
            _fields_ = [(name, ctypes.c_size_t) for name in names.split()]

        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
        mallinfo2.restype = MallInfo2
        info = mallinfo2()
        return info.uordblks + info.hblkhd
    except (OSError, AttributeError):
        return None


def full_window_bytes(config, limit: int, sinks: int) -> int:
    """The bytes a full bounded cache holds, from the model config and the documented layout alone."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_slot = config.num_key_value_heads * head_dim * FLOAT32
    return config.num_hidden_layers * (2 * (limit + 1) + sinks) * per_slot


def make_recorder(meter, every: int, fill_token: int):
    """A streamer that samples every `every` generated tokens and watches the KV bytes after every token."""
    from transformers.generation.streamers import BaseStreamer

    class Recorder(BaseStreamer):
        def __init__(self):
            self.generated, self.samples, self.after_fill = 0, [], set()
            self.started = self.last_wall = self.last_cpu = None

        def put(self, value) -> None:
            now_wall, now_cpu = time.perf_counter(), time.process_time()
            if self.started is None:  # the first call is the prompt
                self.started, self.last_wall, self.last_cpu = now_wall, now_wall, now_cpu
                return
            self.generated += value.numel()
            if self.generated >= fill_token:
                self.after_fill.add(meter.bytes)
            if self.generated % every == 0:
                tokens = every if self.samples else self.generated
                self.samples.append(
                    {
                        "tokens": self.generated,
                        "seconds": now_wall - self.started,
                        "ms_per_token": (now_wall - self.last_wall) * 1e3 / tokens,
                        "cpu_ms_per_token": (now_cpu - self.last_cpu) * 1e3 / tokens,
                        "rss_bytes": current_rss(),
                        "heap_in_use_bytes": heap_in_use(),
                        "kv_bytes": meter.bytes,
                        "load_average": os.getloadavg()[0],  # other work on the machine slows the steps down
                    }
                )
                self.last_wall, self.last_cpu = now_wall, now_cpu
                print(f"\r[soak] {self.generated:,} tokens, {now_wall - self.started:.0f} s", end="", file=sys.stderr)

        def end(self) -> None:
            print(file=sys.stderr)

    return Recorder()


def evaluate(samples: list[dict], kv_seen: set[int], expected_kv: int, fill_token: int, rss_tolerance: float):
    """The three checks as `{name: {"measured", "criterion", "passed"}}`; samples taken before the window was
    full (their interval started before `fill_token`) are left out of the time check."""
    checks = {}
    kv = sorted(kv_seen)
    checks["kv_bytes_constant"] = {
        "measured": kv,
        "criterion": f"exactly {expected_kv} bytes after every token once the window is full",
        "passed": kv == [expected_kv],
    }
    total = samples[-1]["tokens"]
    base = next(sample for sample in samples if sample["tokens"] >= total / 10)
    later = [sample["rss_bytes"] for sample in samples if sample["tokens"] >= base["tokens"]]
    growth = (max(later) - base["rss_bytes"]) / base["rss_bytes"]
    heap = [sample["heap_in_use_bytes"] for sample in (base, samples[-1])]
    checks["rss_growth"] = {
        "measured": growth,
        "from_bytes": base["rss_bytes"],
        "max_bytes": max(later),
        "end_bytes": later[-1],
        # what transformers' generate keeps per token (input_ids and attention_mask, int64) is 16 bytes
        "heap_growth_bytes_per_token": None if None in heap else (heap[1] - heap[0]) / (total - base["tokens"]),
        "criterion": f"< {rss_tolerance:.0%} from {base['tokens']} tokens (10 %) to the end",
        "passed": growth < rss_tolerance,
    }
    starts = [0] + [sample["tokens"] for sample in samples[:-1]]  # where each sample's interval began
    full = [sample for sample, start in zip(samples, starts, strict=True) if start >= fill_token]
    decile = max(1, len(full) // 10)
    first = statistics.median(sample["ms_per_token"] for sample in full[:decile])
    last = statistics.median(sample["ms_per_token"] for sample in full[-decile:])
    cpu_first = statistics.median(sample["cpu_ms_per_token"] for sample in full[:decile])
    cpu_last = statistics.median(sample["cpu_ms_per_token"] for sample in full[-decile:])
    checks["ms_per_token_flat"] = {
        "measured": last / first,
        "first_decile_ms": first,
        "last_decile_ms": last,
        "cpu_ratio": cpu_last / cpu_first,
        "samples_per_decile": decile,
        "criterion": f"median wall ms/token, last decile / first decile in [{TIME_RATIO[0]}, {TIME_RATIO[1]}]",
        "passed": TIME_RATIO[0] <= last / first <= TIME_RATIO[1],
    }
    return checks


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    samples = result["samples"]
    tokens = [sample["tokens"] for sample in samples]
    figure, axes = pyplot.subplots(1, 3, figsize=(15, 4.2))
    series = [
        ("KV cache (MiB)", {"KV bytes": [sample["kv_bytes"] / 2**20 for sample in samples]}),
        ("MiB", {"process RSS": [sample["rss_bytes"] / 2**20 for sample in samples]}),
        ("ms per token", {"wall": [sample["ms_per_token"] for sample in samples]}),
    ]
    series[2][1]["CPU"] = [sample["cpu_ms_per_token"] for sample in samples]
    if None not in (heap := [sample["heap_in_use_bytes"] for sample in samples]):
        series[1][1]["C heap in use"] = [size / 2**20 for size in heap]
    for axis, (label, lines) in zip(axes, series, strict=True):
        for name, values in lines.items():
            axis.plot(tokens, values, linewidth=1.5, label=name)
        axis.set_xlabel("generated tokens")
        axis.set_ylabel(label)
        axis.set_ylim(bottom=0, top=max(max(values) for values in lines.values()) * 1.15)
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right")
    settings = result["settings"]
    figure.suptitle(
        f"soak: {settings['tokens']:,} tokens, tiny Llama, cache_limit={settings['cache_limit']}, "
        f"{settings['sinks']} sinks, greedy, {settings['threads']} thread(s)",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="soak.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000, help="tokens to generate (default: 100000)")
    parser.add_argument("--every", type=int, default=1_000, help="tokens per sample (default: 1000)")
    parser.add_argument("--cache-limit", type=int, default=256, help="(default: 256)")
    parser.add_argument("--sinks", type=int, default=4, help="(default: 4)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--rss-tolerance", type=float, default=0.02, help="(default: 0.02)")
    parser.add_argument("--out", type=Path, default=Path("docs/soak"), help="(default: docs/soak)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.every < 1 or args.tokens < 10 * args.every:
        raise SystemExit("soak.py: error: --tokens must be at least 10 x --every (ten samples), --every >= 1")
    import torch
    import transformers

    import cachelimit
    from cachelimit.live import KVMeter
    from cachelimit.tiny_model import SHAPE, build_tiny_model

    torch.set_num_threads(args.threads)
    model, tokenizer = build_tiny_model()
    cachelimit.patch("llama")
    inputs = tokenizer(PROMPT, return_tensors="pt")
    prompt_tokens = inputs["input_ids"].shape[1]
    # the forward that yields token n has read prompt + n - 1 columns; with L + 1 of them the ring is full
    fill_token = max(1, args.cache_limit + 2 - prompt_tokens)
    expected_kv = full_window_bytes(model.config, args.cache_limit, args.sinks)
    window = {"cache_limit": args.cache_limit, "num_sink_tokens": args.sinks}
    started = time.perf_counter()
    with torch.inference_mode(), KVMeter(model) as meter:
        recorder = make_recorder(meter, args.every, fill_token)
        model.generate(**inputs, max_new_tokens=args.tokens, do_sample=False, streamer=recorder, **window)
    elapsed = time.perf_counter() - started
    checks = evaluate(recorder.samples, recorder.after_fill, expected_kv, fill_token, args.rss_tolerance)
    settings = {**vars(args), "out": str(args.out), "prompt_tokens": prompt_tokens, "fill_token": fill_token}
    settings.update(model=SHAPE, torch=torch.__version__, transformers=transformers.__version__)
    result = {"settings": settings, "elapsed_s": elapsed, "checks": checks, "samples": recorder.samples}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out / "soak.png")
    print(f"soak: {args.tokens:,} tokens in {elapsed:.0f} s ({args.tokens / elapsed:.0f} tok/s)")
    for name, check in checks.items():
        shown = check["measured"] if isinstance(check["measured"], list) else f"{check['measured']:.4f}"
        print(f"  {'ok ' if check['passed'] else 'FAIL'} {name}: {shown} ({check['criterion']})")
    rss, time_check = checks["rss_growth"], checks["ms_per_token_flat"]
    print(
        f"  RSS {rss['from_bytes'] / 2**20:.1f} -> {rss['end_bytes'] / 2**20:.1f} MiB; C heap in use "
        f"+{rss['heap_growth_bytes_per_token'] or 0:.1f} B/token; ms/token {time_check['first_decile_ms']:.3f} -> "
        f"{time_check['last_decile_ms']:.3f} (CPU time ratio {time_check['cpu_ratio']:.3f})"
    )
    print(f"wrote {args.out / 'soak.json'} and {args.out / 'soak.png'}")
    return 0 if all(check["passed"] for check in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
