"""One run of the budget scenario per process: generate with a batch (or beams), report bytes, peak memory, speed.

`bench.budget` starts `python -m cachelimit.bench.budget_run SPECS.json RESULTS.json` once per run (via
`bench.runner`), so the peak RSS a run reports is its own. A spec with `"probe": true` only loads the model and
returns its KV layout (`bench.budget_fit.KVLayout`), which the parent needs to size the runs before any runs.
Progress goes to stdout as `@steps N` lines.

Models: `bench` is the sweep's seeded Mistral-shaped model (`bench.worker.build_model`, random weights, random
prompts); `smollm2` is the real SmolLM2-135M-Instruct (`load_pretrained`), each row prompted with its own slice of
the quality benchmark's text. Every run generates exactly `new_tokens` tokens per row (EOS cannot end it early).

Each run records the 1-minute load average just before and just after its `generate` (`load_average_before`,
`load_average_after`): the runs are timed one after the other on shared machines, and a ratio between two runs is
only read with the load they ran under.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import torch
from transformers import StoppingCriteria

from ..core.cache import kv_bytes
from ..families.patching import patch
from ..hf.compat import passed_cache, uses_rope
from .budget_fit import layout_of
from .worker import VOCAB, build_model, proc_status


def load_model(spec: dict):
    """(model, family) of a spec; the bench model's positions cover the prompt and the generation."""
    if spec["model"] == "smollm2":
        from ..cli.pretrained import load_pretrained

        model, tokenizer = load_pretrained("smollm2", dtype=torch.float32)
        return model, tokenizer, "llama"
    positions = spec.get("prompt_tokens", 0) + spec.get("new_tokens", 0) + 1
    return build_model("mistral", spec["shape"], spec["seed"], max(positions, 256)), None, "mistral"


def layout(model) -> dict:
    element = next(model.parameters()).element_size()
    return vars(layout_of(model.config, element, rope=uses_rope(model.config)))


def prompts(spec: dict, tokenizer, rows: int) -> torch.Tensor:
    """[rows, prompt_tokens]: seeded random ids (bench), or consecutive slices of the default text (smollm2)."""
    length = spec["prompt_tokens"]
    if tokenizer is None:
        generator = torch.Generator().manual_seed(spec["seed"] + 1)
        return torch.randint(1, VOCAB, (rows, length), generator=generator)
    from .scoring import default_text, text_tokens

    ids = text_tokens(tokenizer, default_text(), rows * length)
    return ids.view(rows, length)


class StepWatch(StoppingCriteria):
    """Never stops; after every chosen token reports progress and tracks the most KV bytes the cache held."""

    def __init__(self, cache_ref: dict, report_every: int = 16):
        self.cache_ref, self.report_every = cache_ref, report_every
        self.steps, self.reported, self.most_bytes = 0, 0, 0

    def __call__(self, input_ids, scores, **kwargs):
        self.steps += 1
        self.most_bytes = max(self.most_bytes, kv_bytes(self.cache_ref.get("cache")))
        if self.steps - self.reported >= self.report_every:
            print(f"@steps {self.steps - self.reported}", flush=True)
            self.reported = self.steps
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def __deepcopy__(self, memo):
        return self


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def run_one(spec: dict) -> dict:
    """Generate `new_tokens` after the prompts with the spec's rows (batch x beams) and cache; return its figures."""
    model, tokenizer, family = load_model(spec)
    patch(family)
    batch, beams = spec["batch"], spec["num_beams"]
    ids = prompts(spec, tokenizer, batch)
    cache_ref: dict = {}

    def grab(module, args, kwargs):
        cache_ref.setdefault("cache", passed_cache(kwargs))

    hook = model.register_forward_pre_hook(grab, with_kwargs=True)
    watch = StepWatch(cache_ref)
    window = {} if spec["limit"] is None else {"cache_limit": spec["limit"], "num_sink_tokens": spec["sinks"]}
    before, load_before = proc_status(), load_average()
    started, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=spec["new_tokens"],
            min_new_tokens=spec["new_tokens"],
            do_sample=False,
            num_beams=beams,
            stopping_criteria=[watch],
            disable_compile=True,
            **window,
        )
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    load_after = load_average()
    hook.remove()
    after = proc_status()
    new = output[:, ids.shape[1] :].contiguous()
    if new.shape[1] != spec["new_tokens"]:
        raise RuntimeError(f"generated {new.shape[1]} tokens per row, not {spec['new_tokens']}")
    return {
        **spec,
        "layout": layout(model),
        "kv_bytes_end": kv_bytes(cache_ref.get("cache")),
        "kv_bytes_most": watch.most_bytes,
        "rss_before_bytes": before["VmRSS"],
        "peak_rss_bytes": after["VmHWM"],
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "sequences_out": new.shape[0],
        "tokens_per_second": batch * beams * spec["new_tokens"] / seconds,
        "tokens_per_cpu_second": batch * beams * spec["new_tokens"] / cpu_seconds,
        "cache_class": type(cache_ref.get("cache")).__name__,
        "tokens_sha1": hashlib.sha1(new.numpy().tobytes()).hexdigest()[:16],
        "torch_threads": torch.get_num_threads(),
        "load_average_before": load_before,
        "load_average_after": load_after,
    }


def probe(spec: dict) -> dict:
    model, _, _ = load_model(spec)
    return {"layout": layout(model)}


def main(argv: list[str] | None = None) -> int:
    """`SPECS.json RESULTS.json`: run each spec of the list (or the probe), write the results."""
    spec_path, result_path = (argv if argv is not None else sys.argv[1:])[:2]
    with open(spec_path) as handle:
        specs = json.load(handle)
    results = []
    for spec in specs:
        if spec.get("threads"):
            torch.set_num_threads(spec["threads"])
        results.append(probe(spec) if spec.get("probe") else run_one(spec))
    with open(result_path, "w") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
