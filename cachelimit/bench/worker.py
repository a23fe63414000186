"""What the benchmark's worker process uses: the seeded models, the cache variants, the step clock, the calibration.

`cachelimit bench` starts `python -m cachelimit.bench.cell SPECS.json RESULTS.json` once per cell (a model, L and
batch): every variant of the cell is measured in that process, alternated (`bench.cell`). Progress goes to stdout
as `@steps N` lines, which the parent turns into its progress bar.

Timing goes through `model.generate` (what users run): a `StoppingCriteria` stamps the clocks (CPU time of the
process and wall time) each time a token is chosen. A step's time runs from leaving one stamp to arriving at the
next, so the sampling done inside the callback (cache bytes, RSS) is not counted.
"""

from __future__ import annotations

import resource
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM, StoppingCriteria
from transformers.cache_utils import Cache

from cachelimit.bench.ideal import RingBufferLayer
from cachelimit.core.cache import kv_bytes
from cachelimit.hf.compat import CACHE_ARGUMENT

#: (layers, hidden, heads, MLP width); vocab 1024, float32. "full" is the issue's Mistral-/GPT-2-small shape.
SHAPES = {"full": (12, 768, 12, 3072), "quick": (4, 256, 4, 1024)}
VOCAB = 1024
SINKS = 4


def build_model(family: str, shape: str, seed: int, positions: int, sliding_window: int | None = None):
    """The seeded model of one family; `sliding_window` changes no weight, so every variant gets the same ones."""
    layers, hidden, heads, width = SHAPES[shape]
    torch.manual_seed(seed)
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=VOCAB,
            n_layer=layers,
            n_embd=hidden,
            n_head=heads,
            n_positions=positions,
            bos_token_id=None,
            eos_token_id=None,
        )
        model = GPT2LMHeadModel(config)
    else:
        config = MistralConfig(
            vocab_size=VOCAB,
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=width,
            max_position_embeddings=positions,
            sliding_window=sliding_window,
        )
        model = MistralForCausalLM(config)
    model.set_attn_implementation("sdpa")
    model = model.to(torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def proc_status() -> dict[str, int]:
    """VmRSS / VmHWM of this process in bytes (Linux); VmHWM falls back to getrusage elsewhere."""
    fields = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    name, value = line.split(":")
                    fields[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    fields.setdefault("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    fields.setdefault("VmRSS", -1)
    return fields


class StepClock(StoppingCriteria):
    """Never stops generation; stamps the time a token is chosen and samples memory every `sample_every` tokens.
    `generate` deep-copies its criteria, so the copy is the clock itself."""

    def __init__(self, batch: int, sample_every: int, cache_ref: dict, progress: bool):
        self.never = torch.zeros(batch, dtype=torch.bool)
        self.sample_every, self.cache_ref, self.progress = sample_every, cache_ref, progress
        self.arrive: list[float] = []
        self.leave: list[float] = []
        self.arrive_cpu: list[float] = []
        self.leave_cpu: list[float] = []
        self.samples: list[list[int]] = []
        self.reported = 0

    def __call__(self, input_ids, scores, **kwargs):
        self.arrive_cpu.append(time.process_time())
        self.arrive.append(time.perf_counter())
        count = len(self.arrive)
        if count == 1 or count % self.sample_every == 0:
            status = proc_status()
            self.samples.append([count, kv_bytes(self.cache_ref.get("cache")), status["VmRSS"], status["VmHWM"]])
            if self.progress:
                print(f"@steps {count - self.reported}", flush=True)
                self.reported = count
        self.leave.append(time.perf_counter())
        self.leave_cpu.append(time.process_time())
        return self.never

    def __deepcopy__(self, memo):
        return self

    def step_seconds(self) -> list[float]:
        """Seconds of each decode step (from leaving one stamp to arriving at the next)."""
        return [arrive - leave for arrive, leave in zip(self.arrive[1:], self.leave[:-1], strict=True)]

    def step_cpu_seconds(self) -> list[float]:
        """CPU seconds of this process in each decode step, stamped like `step_seconds`."""
        return [arrive - leave for arrive, leave in zip(self.arrive_cpu[1:], self.leave_cpu[:-1], strict=True)]


def variant_kwargs(spec: dict, model) -> dict:
    """The `generate` arguments that select one cache variant."""
    variant, limit = spec["variant"], spec["limit"]
    if variant in ("dynamic", "native_sliding"):
        return {}
    if variant == "native_static":
        return {"cache_implementation": "static"}
    if variant == "cachelimit":
        return {"cache_limit": limit}
    if variant == "cachelimit_sinks":
        return {"cache_limit": limit, "num_sink_tokens": SINKS}
    if variant == "ideal":
        return {
            CACHE_ARGUMENT: Cache(layers=[RingBufferLayer(limit + 1) for _ in range(model.config.num_hidden_layers)])
        }
    raise ValueError(f"Unknown variant {variant!r}.")


def calibrate(spec: dict) -> dict:
    """Quick per-family timings (build, prefill per token, decode step per batch) and the memory copy bandwidth,
    from which the parent estimates the sweep's duration before starting it."""
    figures: dict = {"families": {}}
    for family in spec["families"]:
        started = time.perf_counter()
        model = build_model(family, spec["shape"], spec["seed"], positions=256)
        layers, hidden = SHAPES[spec["shape"]][:2]
        family_figures = {
            "build_s": time.perf_counter() - started,
            "kv_bytes_per_position": layers * 2 * hidden * 4,  # keys + values, float32, one row
            "prefill_s_per_token": {},
            "step_ms": {},
        }
        for batch in spec["batches"]:
            prompt = torch.randint(1, VOCAB, (batch, 64))
            clock = StepClock(batch, 1 << 30, {}, progress=False)
            started = time.perf_counter()
            with torch.inference_mode():
                model.generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    max_new_tokens=12,
                    do_sample=False,
                    stopping_criteria=[clock],
                    disable_compile=True,
                )
            steps = sorted(clock.step_seconds()[1:])
            family_figures["prefill_s_per_token"][batch] = (clock.arrive[0] - started) / prompt.numel()
            family_figures["step_ms"][batch] = steps[len(steps) // 2] * 1e3
        figures["families"][family] = family_figures
        del model
    block = torch.ones(32 << 20)  # 128 MiB: larger than any CPU cache, like the KV copies it stands for
    copies = []
    for _ in range(3):
        started = time.perf_counter()
        torch.cat([block, block])
        copies.append(time.perf_counter() - started)
    figures["copy_bytes_per_s"] = 4 * block.numel() * block.element_size() / sorted(copies)[1]
    return figures
