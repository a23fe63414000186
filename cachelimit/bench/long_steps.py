"""The long-context decode step (`cachelimit bench --long`): what one steady step costs at total length T.

Six variants on SmolLM2-135M's weights, one `generate` call of `steps` single-token forwards each, all timed by
`bench.alternate.measure` in one process (variants alternated, one untimed warm-up round, each cache built untimed
by `setup` before its call), as CPU-time ratios to the unbounded cache at T:

- `unbounded`: transformers' `DynamicCache` holding T - 1 positions (every step appends, and attends to all of them);
- `unbounded at T=L`: the same cache holding only L - 1 positions (what a step costs when the context is L long);
- `cachelimit` / `cachelimit + S sinks`: `generate(cache_limit=L[, num_sink_tokens=S])`, continuing a `BoundedCache`
  that has seen T - 1 columns;
- `native window`: transformers' own sliding window on the same weights (SmolLM2 is a Llama, which has none: a
  `MistralForCausalLM` with `sliding_window = L + 1` and the Llama's state dict, the architecture Llama's is, whose
  `DynamicCache(config=...)` is made of `DynamicSlidingWindowLayer`s: L positions kept, cat + slice each step);
- `ideal ring`: `bench.ideal.RingBufferLayer` (L + 1 preallocated slots, one in-place write per step).

How the caches reach T without a real prefill of T tokens (which would take many minutes per case on a CPU and
measures the prefill, not the step): a decode step's cost depends on the shapes it reads, not on what the keys say,
so every cache is filled through its own `update` with one seeded random block of T - 1 keys and values (the same
block for every layer and variant): the dynamic caches append it, the native window keeps its last L, cachelimit
plans it as one forward of T - 1 columns (`begin_step`, exactly what an unchunked bounded prefill does, then each
layer's `update`) and keeps its last L - S plus S sinks, the ideal ring is written full with its column count set to
T - 1. The timed call then passes T token ids (random, seeded): `generate` reads the one not yet cached and decodes
from position T - 1 on, so each of its `steps` forwards is one token at a position >= T - 1.
"""

from __future__ import annotations

import copy

import torch

from ..core.cache import BoundedCache
from ..hf.compat import CACHE_ARGUMENT
from .alternate import Measurement, measure
from .ideal import RingBufferLayer

UNBOUNDED, AT_LIMIT, CACHELIMIT, SINKS_VARIANT, NATIVE, IDEAL = (
    "unbounded",
    "unbounded at T=L",
    "cachelimit",
    "cachelimit + sinks",
    "native window",
    "ideal ring",
)
VARIANTS = (UNBOUNDED, AT_LIMIT, CACHELIMIT, SINKS_VARIANT, NATIVE, IDEAL)


def native_window_model(model, limit: int):
    """transformers' own sliding window on `model`'s weights: a Mistral (Llama's architecture with a window) with
    `sliding_window = limit + 1`, i.e. `limit` past positions visible, as `cache_limit=limit` keeps."""
    from transformers import MistralConfig, MistralForCausalLM

    settings = model.config.to_dict()
    for key in ("architectures", "model_type", "transformers_version", "_name_or_path", "_model_name_or_path"):
        settings.pop(key, None)
    config = MistralConfig(**{**settings, "sliding_window": limit + 1})
    native = MistralForCausalLM(config).to(model.dtype)
    missing, unexpected = native.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [name for name in missing if "lm_head" not in name]:
        raise RuntimeError(f"the Mistral copy does not take the Llama's weights: {missing} {unexpected}")
    native.tie_weights()
    # The buffers are not in the state dict, and `.to(dtype)` rounded the Mistral's: the rotary's inverse
    # frequencies, which transformers keeps in float32 (in bfloat16 they shift every position's rotation: logits
    # 40 apart at 2k tokens). The Llama's own, as loaded, are copied over.
    for name, buffer in model.named_buffers():
        owner, _, attribute = name.rpartition(".")
        native.get_submodule(owner)._buffers[attribute] = buffer.clone()
    native.set_attn_implementation(model.config._attn_implementation)
    native.generation_config = copy.deepcopy(model.generation_config)  # the same logits processors and stops
    return native.eval()


class Filler:
    """Builds each variant's cache as it stands after `total - 1` columns (see the module): one random block of keys
    and values, shared by every layer and variant."""

    def __init__(self, model, native, total: int, limit: int, sinks: int, seed: int):
        config = model.config
        self.model, self.native, self.total, self.limit, self.sinks = model, native, total, limit, sinks
        self.layers = config.num_hidden_layers
        shape = (1, config.num_key_value_heads, total - 1, config.head_dim)
        generator = torch.Generator().manual_seed(seed)
        self.keys = torch.randn(shape, generator=generator).to(model.dtype)
        self.values = torch.randn(shape, generator=generator).to(model.dtype)

    def dynamic(self, model, columns: int):
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        for index in range(self.layers):
            cache.update(self.keys[:, :, -columns:], self.values[:, :, -columns:], index)
        return cache

    def bounded(self, sinks: int) -> BoundedCache:
        cache = BoundedCache.from_model(self.model, self.limit, sinks)
        cache.begin_step(torch.ones(1, self.total - 1, dtype=torch.bool))
        for index in range(self.layers):
            cache.update(self.keys, self.values, index)
        return cache

    def ideal(self):
        from transformers.cache_utils import Cache

        slots = self.limit + 1
        layers = [RingBufferLayer(slots) for _ in range(self.layers)]
        seen = self.total - 1
        columns = torch.arange(max(0, seen - slots), seen)  # the last `slots` columns, each at its slot column % slots
        for layer in layers:
            layer.lazy_initialization(self.keys[:, :, :1], self.values[:, :, :1])
            layer.keys[:, :, columns % slots] = self.keys[:, :, columns]
            layer.values[:, :, columns % slots] = self.values[:, :, columns]
            layer.cumulative_length = seen
        return Cache(layers=layers)

    def build(self, variant: str) -> tuple[object, dict, int]:
        """(the model to run, the `generate` arguments of the variant, the total length its ids must have)."""
        limit = self.limit
        if variant == UNBOUNDED:
            return self.model, {CACHE_ARGUMENT: self.dynamic(self.model, self.total - 1)}, self.total
        if variant == AT_LIMIT:
            return self.model, {CACHE_ARGUMENT: self.dynamic(self.model, limit - 1)}, limit
        if variant == CACHELIMIT:
            return self.model, {CACHE_ARGUMENT: self.bounded(0), "cache_limit": limit}, self.total
        if variant == SINKS_VARIANT:
            cache = self.bounded(self.sinks)
            return self.model, {CACHE_ARGUMENT: cache, "cache_limit": limit, "num_sink_tokens": self.sinks}, self.total
        if variant == NATIVE:
            return self.native, {CACHE_ARGUMENT: self.dynamic(self.native, self.total - 1)}, self.total
        if variant == IDEAL:
            return self.model, {CACHE_ARGUMENT: self.ideal()}, self.total
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")


def decode(model, ids: torch.Tensor, steps: int, arguments: dict) -> None:
    """One unit of work: `steps` single-token forwards continuing the cache in `arguments` (greedy)."""
    with torch.inference_mode():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            disable_compile=True,
            **arguments,
        )


def same_work(model, native, total: int, limit: int, sinks: int, steps: int = 4, seed: int = 0) -> dict:
    """Whether the windowed variants do the same work from the same fill: the greedy tokens of cachelimit, the native
    window and the ideal ring (each attends to the same L past positions), and their largest logit difference to the
    native window's (summation order differs: slots are not in column order)."""
    filler = Filler(model, native, total, limit, sinks, seed)
    ids = torch.randint(3, model.config.vocab_size, (1, total), generator=torch.Generator().manual_seed(seed + 1))
    tokens, logits = {}, {}
    for name in (NATIVE, CACHELIMIT, IDEAL):
        runner, arguments, width = filler.build(name)
        with torch.inference_mode():
            out = runner.generate(
                ids[:, -width:], attention_mask=torch.ones_like(ids[:, -width:]), max_new_tokens=steps,
                min_new_tokens=steps, do_sample=False, disable_compile=True, output_logits=True,
                return_dict_in_generate=True, **arguments,
            )  # fmt: skip
        tokens[name] = out.sequences[0, -steps:].tolist()
        logits[name] = torch.stack(out.logits).float()
    return {
        "total": total,
        "tokens": tokens,
        "same_tokens": len({tuple(t) for t in tokens.values()}) == 1,
        "max_logit_diff_vs_native": {name: (logits[name] - logits[NATIVE]).abs().max().item() for name in tokens},
    }


def measure_steps(
    model, native, total: int, limit: int, sinks: int, steps: int, repeats: int, seed: int = 0
) -> Measurement:
    """Every variant's `steps`-step call at total length `total`, alternated (`measure`), baseline `unbounded`."""
    filler = Filler(model, native, total, limit, sinks, seed)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (1, total), generator=torch.Generator().manual_seed(seed + 1))
    prepared: dict[str, tuple] = {}

    def setup(name: str) -> None:
        prepared[name] = filler.build(name)

    def call(name: str) -> None:
        runner, arguments, width = prepared.pop(name)
        decode(runner, ids[:, -width:], steps, arguments)

    calls = {name: (lambda name=name: call(name)) for name in VARIANTS}
    return measure(calls, baseline=UNBOUNDED, repeats=repeats, warmup=1, setup=setup)
