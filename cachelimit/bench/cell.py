"""One cell of the sweep (a model, L, batch), every variant timed in one process by `bench.alternate.measure`.

Why one process: a shared machine's speed drifts from one minute to the next, so times taken in separate processes
compare the moments as much as the caches. Here each variant's call runs next to the others', in rotating order,
and its CPU time is divided by the baseline's of the same repeat (issue 28).

A call is one `generate` that continues a cache prefilled once per variant: `prepare` runs the prompt through
`generate` (one new token, untimed, once per variant and cell) and keeps the cache it returns; every call
(warm-up included) decodes `new_tokens - 1` more tokens from a deep copy of it, so no call pays for a prefill and
every call starts from the same state. The call times its own decode steps (`StepClock`: CPU and wall clock per
step, the callback's sampling left out) and reports the steady ones as its `Timing`: the steps after the first
`warm_up_steps(n)` (allocator and first-step work), or for the long run the steps after the window is full.
Deterministic figures are recorded exactly: the KV bytes after every step and the tokens' hash of each variant.
A variant's record lists the per-step times of every call, the warm-up rounds' first (`stats.timed_calls`).
This module is the worker process itself (`python -m cachelimit.bench.cell SPECS.json RESULTS.json`, `main`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import time

import torch

from ..core.cache import kv_bytes
from ..hf.compat import CACHE_ARGUMENT, passed_cache
from .alternate import Timing, measure
from .worker import VOCAB, StepClock, build_model, calibrate, proc_status, variant_kwargs

WARM_UP = 8  # first decode steps of a call left out of its timing (allocator and cache warm-up)


def warm_up_steps(steps: int) -> int:
    """How many of a call's `steps` decode steps are warm-up: 8, or an eighth of a short call."""
    return min(WARM_UP, steps // 8)


def steady_slice(job: dict, steps: int) -> slice:
    """The steps a call's `Timing` sums: after the window is full for the long run, after warm-up otherwise."""
    if job["role"] == "long":
        return slice(min(steps - 1, max(0, job["limit"] - job["prompt_tokens"])), steps)
    return slice(warm_up_steps(steps), steps)


class VariantRun:
    """One variant of a cell: its model and `generate` arguments, the cache after the prompt, what its calls saw."""

    def __init__(self, job: dict, name: str, variant: str, limit: int, models: dict, prompt: torch.Tensor):
        self.job, self.name, self.variant, self.limit = job, name, variant, limit
        self.model = models[variant.startswith("native")]
        given = variant_kwargs({**job, "variant": variant, "limit": limit}, self.model)
        first = {CACHE_ARGUMENT: given.pop(CACHE_ARGUMENT)} if CACHE_ARGUMENT in given else {}
        if given.pop("cache_implementation", None) == "static":  # built here, sized for the run, so it can be copied
            from transformers import StaticCache

            total = job["prompt_tokens"] + job["new_tokens"]
            first = {CACHE_ARGUMENT: StaticCache(config=self.model.config, max_cache_len=total)}
        self.kwargs = given  # what every call passes besides the cache (cache_limit, num_sink_tokens)
        self.step_cpu_ms: list[list[float]] = []
        self.step_wall_ms: list[list[float]] = []
        self.samples: list[list[int]] = []
        self.shas: list[str] = []  # the new tokens' hash, per call: equal, as every call starts from the same cache
        cache_ref: dict = {}
        clock = StepClock(job["batch"], 1 << 30, cache_ref, progress=False)
        self.fresh = first
        output = self._generate(prompt, 1, clock, cache_ref)
        self.prefilled_ids, self.prefilled_cache = output.sequences, cache_ref["cache"]
        status = proc_status()
        self.prefill_sample = [1, kv_bytes(self.prefilled_cache), status["VmRSS"], status["VmHWM"]]

    def _generate(self, ids: torch.Tensor, new_tokens: int, clock: StepClock, cache_ref: dict):
        def grab_cache(module, args, kwargs):
            cache_ref.setdefault("cache", passed_cache(kwargs))

        hook = self.model.register_forward_pre_hook(grab_cache, with_kwargs=True)
        try:
            with torch.inference_mode():
                return self.model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    do_sample=False,
                    stopping_criteria=[clock],
                    disable_compile=True,
                    return_dict_in_generate=True,
                    **self.kwargs,
                    **self.fresh,
                )
        finally:
            hook.remove()

    def setup(self) -> None:
        """Untimed, before every call: a fresh copy of the prefilled cache."""
        with torch.inference_mode():
            self.fresh = {CACHE_ARGUMENT: copy.deepcopy(self.prefilled_cache)}

    def __call__(self) -> Timing:
        job = self.job
        cache_ref = {"cache": self.fresh[CACHE_ARGUMENT]}
        clock = StepClock(job["batch"], job["sample_every"], cache_ref, job.get("progress", False))
        output = self._generate(self.prefilled_ids, job["new_tokens"] - 1, clock, cache_ref)
        cpu, wall = clock.step_cpu_seconds(), clock.step_seconds()
        self.step_cpu_ms.append([round(s * 1e3, 4) for s in cpu])
        self.step_wall_ms.append([round(s * 1e3, 4) for s in wall])
        status = proc_status()
        final = [len(clock.arrive), kv_bytes(cache_ref["cache"]), status["VmRSS"], status["VmHWM"]]
        samples = clock.samples if clock.samples[-1][0] == final[0] else [*clock.samples, final]
        self.samples = [[count + 1, *rest] for count, *rest in samples]  # + the prefill's token
        self.tokens = output.sequences[:, job["prompt_tokens"] :].contiguous()
        self.shas.append(hashlib.sha1(self.tokens.numpy().tobytes()).hexdigest()[:16])
        self.cache = cache_ref["cache"]
        steady = steady_slice(job, len(cpu))
        self.steady_steps = len(cpu[steady])
        return Timing(cpu_s=sum(cpu[steady]), wall_s=sum(wall[steady]))

    def record(self) -> dict:
        layers = getattr(self.cache, "layers", None)
        return {
            "variant": self.variant,
            "limit": self.limit,
            "steady_steps": self.steady_steps,  # the steps each call's Timing sums
            "step_cpu_ms": self.step_cpu_ms,
            "step_wall_ms": self.step_wall_ms,
            "samples": [self.prefill_sample, *self.samples],  # [tokens, KV bytes, RSS, peak RSS], the last call
            "kv_bytes": kv_bytes(self.cache),
            "tokens_sha1": self.shas[-1],
            "same_tokens_every_call": len(set(self.shas)) == 1,
            "cache_class": type(self.cache).__name__,
            "layer_class": type(layers[0]).__name__ if layers else None,
        }


def run_cell(job: dict) -> dict:
    """Measure every variant of `job` (a cell of the plan: `variants` = [[name, variant, limit], ...]) in this
    process: `repeats` timed rounds after `warmup` untimed ones, ratios to `job["baseline"]`."""
    from ..families.patching import patch

    natives = [limit for _, variant, limit in job["variants"] if variant.startswith("native")]
    models = {False: build_model(job["family"], job["shape"], job["seed"], job["positions"])}
    if natives:  # the same seeded weights: `sliding_window` changes none of them
        window = natives[0] + 1
        models[True] = build_model(job["family"], job["shape"], job["seed"], job["positions"], sliding_window=window)
    patch(job["family"])
    generator = torch.Generator().manual_seed(job["seed"] + 1)
    prompt = torch.randint(1, VOCAB, (job["batch"], job["prompt_tokens"]), generator=generator)
    runs = {name: VariantRun(job, name, variant, limit, models, prompt) for name, variant, limit in job["variants"]}
    measurement = measure(
        runs, baseline=job["baseline"], repeats=job["repeats"], warmup=job["warmup"], setup=lambda n: runs[n].setup()
    )
    status = proc_status()
    return {
        **job,
        "measurement": measurement.to_json(),
        "per_variant": {name: run.record() for name, run in runs.items()},
        "peak_rss_bytes": status["VmHWM"],
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    """`SPECS.json RESULTS.json`: run each spec of the list in this process (or a calibration), write the results."""
    spec_path, result_path = (argv if argv is not None else sys.argv[1:])[:2]
    with open(spec_path) as handle:
        specs = json.load(handle)
    started = time.perf_counter()
    if isinstance(specs, dict):
        results = {**calibrate(specs), "compute_s": time.perf_counter() - started}
    else:
        results = []
        for index, spec in enumerate(specs):
            if spec.get("threads"):
                torch.set_num_threads(spec["threads"])
            print(f"@job {index}", flush=True)
            results.append(run_cell(spec))
    with open(result_path, "w") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
