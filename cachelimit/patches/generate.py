"""The `generate` installed on patched classes: validate a bounded run, then hand it to transformers.

Everything that can be wrong with a bounded run is checked here, before any token is generated; the run
itself is transformers' own `generate` with a `BoundedCache` as `past_key_values`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.cache_utils import Cache

from ..attention_order import attentions_in_sequence_order
from ..compat import CHUNKED_PREFILL_AFTER_A_CACHE, passed_cache, require, with_cache
from ..utils.masks import SUPPORTED_ATTENTION
from ..utils.validation import check_int, check_window
from ..window_cache import BoundedCache
from .applier import family_of, original_attribute

_ASSISTED = ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit")


def _resolved_config(model, generation_config, kwargs) -> GenerationConfig:
    """The generation config `generate` will use (model defaults, then the given config, then kwargs)."""
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    # Like transformers: a passed config is completed by the model's own defaults, then the kwargs win.
    config.update(**model.generation_config.to_dict(), defaults_only=True)
    config.update(**{key: value for key, value in kwargs.items() if hasattr(config, key)})
    return config


def native_window(model) -> int | None:
    """The model's own sliding window (keys a query sees, itself included), if it has one."""
    window = getattr(model.config, "sliding_window", None)
    return window if isinstance(window, int) and window > 0 else None


def effective_limit(model, cache_limit: int) -> int:
    """The smaller window wins: a native `sliding_window = W` keeps at most W - 1 past positions."""
    window = native_window(model)
    return cache_limit if window is None else min(cache_limit, window - 1)


def _prompt(inputs, kwargs) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    tokens = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
    return tokens, kwargs.get("attention_mask")


def check_bounded_run(model, inputs, generation_config, cache_limit, num_sink_tokens, kwargs) -> BoundedCache:
    """Raise on anything a bounded run cannot do; return the cache it will use."""
    limit, sinks = check_window(cache_limit, num_sink_tokens)
    config = _resolved_config(model, generation_config, kwargs)
    if config.use_cache is False:
        raise ValueError("`cache_limit` bounds the KV cache, so it needs `use_cache=True` (got use_cache=False).")
    if config.cache_implementation is not None:
        raise ValueError(
            f"`cache_limit` cannot be combined with cache_implementation={config.cache_implementation!r}: "
            "the bounded cache is its own implementation."
        )
    for name in _ASSISTED:
        if kwargs.get(name) is not None or getattr(config, name, None):
            raise ValueError(f"`cache_limit` does not support assisted decoding (`{name}` was given).")
    if config.prefill_chunk_size is not None:
        check_int("prefill_chunk_size", config.prefill_chunk_size, 1)
    if model.config._attn_implementation not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"`cache_limit` supports attn_implementation in {SUPPORTED_ATTENTION}, "
            f"got {model.config._attn_implementation!r}."
        )
    effective = effective_limit(model, limit)
    if sinks >= effective:
        raise ValueError(
            f"`num_sink_tokens` must be an int in [0, {effective - 1}] (below the effective cache limit "
            f"{effective}), got {sinks}."
        )
    family = family_of(model)
    tokens, mask = _prompt(inputs, kwargs)
    if family.check_generation is not None and tokens is not None:
        longest = int(mask.sum(-1).max()) if mask is not None else tokens.shape[1]
        if config.max_new_tokens is not None:
            max_new = config.max_new_tokens
        else:
            max_new = (config.max_length if config.max_length is not None else 20) - tokens.shape[1]
        family.check_generation(model, longest, max_new)

    cache = passed_cache(kwargs)
    window_prefill = config.prefill_chunk_size is not None
    if cache is None:
        rotary = family.rotary(model) if (family.rotary is not None and sinks) else None
        return BoundedCache(
            effective, sinks, window_prefill=window_prefill, native_window=native_window(model), rotary=rotary
        )
    if not isinstance(cache, BoundedCache):
        kind = type(cache).__name__ if isinstance(cache, Cache) else repr(type(cache))
        raise ValueError(
            f"`cache_limit` continues only from a cachelimit.BoundedCache (the `past_key_values` a bounded "
            f"`generate` returns), got {kind}."
        )
    if (cache.policy.limit, cache.policy.num_sinks) != (effective, sinks):
        raise ValueError(
            f"The given cache was built with cache_limit={cache.policy.limit}, num_sink_tokens="
            f"{cache.policy.num_sinks}; this call asks for cache_limit={effective}, num_sink_tokens={sinks}."
        )
    if window_prefill:
        require("`prefill_chunk_size` when continuing from a returned cache", CHUNKED_PREFILL_AFTER_A_CACHE)
    cache.set_window_prefill(window_prefill)
    return cache


def generate(self, inputs=None, generation_config=None, *args, cache_limit=None, num_sink_tokens=None, **kwargs):
    """transformers' `generate`, plus `cache_limit=L` (keep at most L cached positions) and
    `num_sink_tokens=S` (of which the first S real tokens of each row). Without them: unchanged."""
    setting = getattr(self, "_cachelimit_setting", None)
    if setting is not None:
        inputs, generation_config, cache_limit, num_sink_tokens, kwargs = setting.apply(
            self, inputs, generation_config, cache_limit, num_sink_tokens, kwargs
        )
    original = original_attribute(type(self), "generate")
    if cache_limit is None and num_sink_tokens is None:
        return original(self, inputs, generation_config, *args, **kwargs)
    cache = check_bounded_run(self, inputs, generation_config, cache_limit, num_sink_tokens, kwargs)
    kwargs = with_cache(kwargs, cache)
    with attentions_in_sequence_order(self, cache):  # output_attentions: key columns in sequence order
        return original(
            self, inputs, generation_config, *args, cache_limit=cache_limit, num_sink_tokens=num_sink_tokens, **kwargs
        )


def set_cache_implementation(self, name: str, **kwargs: Any) -> None:
    """Choose the cache every later `generate` of this model instance uses: a name of
    `cachelimit.CACHE_IMPLEMENTATIONS` ("dynamic", "static", "offloaded", "quantized", "window", "sink" or a
    registered one) and its keyword arguments, checked now. "dynamic" restores the default (see `cachelimit.registry`).
    """
    from ..registry import set_cache_implementation as set_for_model

    set_for_model(self, name, **kwargs)
