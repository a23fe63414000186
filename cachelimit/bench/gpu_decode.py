"""The GPU check's decoding measurements: step cost and memory at long context, the scored policies on the device,
and host syncs per step (`benchmarks/gpu_check.py`).

The real SmolLM2 cannot travel to the GPU machine this project is lent (its GGUF file is larger than what a call may
carry), so the decode speed runs on a model of SmolLM2-135M's shapes (30 layers, 9 query and 3 KV heads of 64, hidden
576) with seeded random weights: a decode step's cost depends on the shapes, not on the weights. Greedy decoding
with no EOS, so every run decodes all its tokens.

Every function takes its device, so the tests run each one on CPU, small; on CPU `generate` never compiles, so the
"compiled" variants run eagerly there (the rehearsal checks the plumbing, not the compile).
"""

from __future__ import annotations

import json
import statistics
import time
import warnings

import torch

from ..core.cache import BoundedCache
from ..families.patching import patch
from ..hf.compat import CACHE_ARGUMENT
from .gpu_checks import compare, greedy, prompts, tiny_mistral

#: SmolLM2-135M's shapes (its config.json); the rotary base and vocabulary size do not change a step's cost much
#: but are kept as the real model's
SMOLLM2_SHAPES = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
POLICIES = ("keydiff", "tova", "snapkv")


def smollm2_shaped(device, dtype=torch.bfloat16, positions: int = 32768 + 64, **shapes):
    """A patched Llama of SmolLM2-135M's shapes (or `shapes` over them), seeded random weights, no EOS."""
    from transformers import LlamaConfig, LlamaForCausalLM

    patch("llama")
    config = LlamaConfig(**{**SMOLLM2_SHAPES, **shapes, "max_position_embeddings": positions})
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def variants(model, limit: int, compiled: bool) -> dict:
    """Each variant's `generate` options, made fresh for every run (a static ring is a new cache each time)."""
    found = {
        "unbounded": lambda: {"cache_limit": None},
        "window": lambda: {"cache_limit": limit},
        "window + 4 sinks": lambda: {"cache_limit": limit, "num_sink_tokens": 4},
    }
    for name in POLICIES:
        found[f"{name} + 4 sinks"] = lambda name=name: {
            "cache_limit": limit,
            "num_sink_tokens": 4,
            "cache_policy": name,
        }
    if compiled:
        found["compiled StaticCache"] = lambda: {"cache_implementation": "static", "cache_limit": None}
        for sinks in (0, 4):
            found[f"compiled ring{' + 4 sinks' if sinks else ''}"] = lambda sinks=sinks: {
                CACHE_ARGUMENT: BoundedCache.from_model(model, limit, sinks, static=True)
            }
    return found


def _synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed_run(model, ids, new: int, options: dict) -> tuple[float, int]:
    """Seconds for one greedy `generate` of `new` tokens, and the peak device memory it added (0 on CPU)."""
    cuda = ids.device.type == "cuda"
    _synchronize(ids.device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    started = time.perf_counter()
    greedy(model, ids, torch.ones_like(ids), new, **options)
    _synchronize(ids.device)
    seconds = time.perf_counter() - started
    return seconds, (torch.cuda.max_memory_allocated() - before) if cuda else 0


def decode_speed(model, lengths, new: int = 32, repeats: int = 3, limit: int = 1024, compiled_at=(), deadline=None):
    """Per-step decode time of every variant at each total length in `lengths` (a prompt of `length - new`, then
    `new` tokens): a run of `new` tokens minus a run of 1, over `new - 1` steps. Variants alternate, in a rotating
    order, within each repeat; the first repeat warms up (compiles) and is discarded. Ratios are to the unbounded
    step of the same repeat (and, for compiled variants, to compiled `StaticCache`): median [min, max].
    `deadline` (a `time.monotonic()` value) skips the lengths, and the repeats after the first timed one, that would
    start after it. Each length's rows are printed as they come, so a run cut short still shows them."""
    rows = []
    for length in lengths:
        if deadline is not None and time.monotonic() > deadline:
            rows.append({"check": "decode speed", "case": f"T={length}", "status": "skipped", "detail": "time"})
            continue
        ids = torch.randint(1, model.config.vocab_size, (1, length - new), generator=torch.Generator().manual_seed(0))
        ids = ids.to(model.device)
        runs = variants(model, limit, length in compiled_at)
        names, steps, peaks = list(runs), {name: [] for name in runs}, {}
        for repeat in range(repeats + 1):
            if repeat > 1 and deadline is not None and time.monotonic() > deadline:
                break
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                one, _ = timed_run(model, ids, 1, runs[name]())
                many, peak = timed_run(model, ids, new, runs[name]())
                if repeat:
                    steps[name].append((many - one) * 1000 / (new - 1))
                    peaks[name] = max(peaks.get(name, 0), peak)
        for name in names:
            baseline = "compiled StaticCache" if name.startswith("compiled") else "unbounded"
            ratios = [ms / base for ms, base in zip(steps[name], steps[baseline], strict=True)]
            rows.append(
                {
                    "check": "decode speed",
                    "case": f"T={length}, {name}",
                    "status": "pass",
                    "value": statistics.median(steps[name]),
                    "unit": "ms/step",
                    "ratio": statistics.median(ratios),
                    "ratio_to": baseline,
                    "ratio_range": [min(ratios), max(ratios)],
                    "steps_ms": steps[name],
                    "peak_memory_bytes": peaks[name],
                    "detail": f"vs {baseline}: [{min(ratios):.3g}, {max(ratios):.3g}], peak +{peaks[name] / 2**20:.0f} MiB",
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def policies_across_devices(device, reference_device="cpu", new: int = 40):
    """Each scored policy on `device` against the same run on `reference_device` (where the test suite checks it
    against the slow reference and the replay): float32, a left-padded batch, 4 sinks, a limit that cuts."""
    rows = []
    for policy in POLICIES:
        runs = []
        for where in (device, reference_device):
            model = tiny_mistral(where)
            ids, mask = prompts(where)
            runs.append(greedy(model, ids, mask, new, cache_limit=12, num_sink_tokens=4, cache_policy=policy))
        rows.append(compare({"check": "policies", "case": f"{policy} vs {reference_device}"}, *runs, 1e-3))
    return rows


def count_syncs(model, ids, mask, new: int, options: dict) -> int:
    """How many synchronizing CUDA calls one `generate` makes (torch's sync debug mode, counted as warnings; none
    on CPU, where the mode does not exist)."""
    cuda = ids.device.type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            greedy(model, ids, mask, new, **options)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(warning.message) for warning in caught)


def host_syncs(device, short: int = 8, long: int = 24):
    """Syncs per decode step, from two runs that differ only in length: each bounded variant against the
    unbounded run (transformers' own loop syncs once a step to check stopping; cachelimit must add none)."""
    model = tiny_mistral(device)
    ids, mask = prompts(device, (40, 40))
    cases = {"unbounded": {"cache_limit": None}, "window + 4 sinks": {"cache_limit": 12, "num_sink_tokens": 4}}
    cases.update({f"{p} + 4 sinks": {"cache_limit": 12, "num_sink_tokens": 4, "cache_policy": p} for p in POLICIES})
    per_step = {}
    for case, options in cases.items():
        counts = [count_syncs(model, ids, mask, new, options) for new in (short, long)]
        per_step[case] = (counts[1] - counts[0]) / (long - short)
    rows = []
    for case, value in per_step.items():
        status = "pass" if value <= per_step["unbounded"] else "fail"
        rows.append({"check": "host syncs", "case": case, "status": status, "value": value, "unit": "syncs/step"})
    return rows
