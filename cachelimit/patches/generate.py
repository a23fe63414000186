"""The `generate` installed on patched classes: find out whether a call is a bounded run, validate it, then hand it
to transformers.

A call is bounded when it says so: `cache_limit`/`num_sink_tokens` as keyword arguments, as fields of the
`generation_config` it passes or of the model's own `generation_config` (saved in generation_config.json), through
`set_cache_implementation`, or by passing a `BoundedCache` (continuing a bounded run). Every source goes through
the same validator (`utils.validation`) and every check here runs before any token is generated; the run itself is
transformers' own `generate` with a `BoundedCache` as `past_key_values` (the patched
`prepare_inputs_for_generation` recognises that cache).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
import types
import warnings
from collections.abc import Iterator
from typing import Any

from transformers import GenerationConfig
from transformers.cache_utils import Cache

from ..attention_order import attentions_in_sequence_order
from ..compat import (
    CHUNKED_PREFILL_AFTER_A_CACHE,
    CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN,
    GENERATE_ADVANCES_POSITION_IDS,
    fill_generation_defaults,
    passed_cache,
    require,
    with_cache,
)
from ..layered_cache import LayeredBoundedCache, bounded_cache_for, layer_groups
from ..utils import layers
from ..utils.generation import check_prompt, make_prepare_inputs
from ..utils.masks import SUPPORTED_ATTENTION
from ..utils.validation import check_int, check_window
from ..window_cache import BoundedCache
from .applier import family_of, install_on_patch, original_attribute

_ASSISTED = ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit")
_FIELDS = ("cache_limit", "num_sink_tokens")


def _resolved_config(model, generation_config, kwargs) -> GenerationConfig:
    """The generation config `generate` will use (model defaults, then the given config, then kwargs)."""
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    # Like transformers: a passed config is completed by the model's own defaults, then the kwargs win.
    fill_generation_defaults(config, model.generation_config.to_dict())
    config.update(**{key: value for key, value in kwargs.items() if hasattr(config, key)})
    return config


def native_window(model) -> int | None:
    """The model's own sliding window (keys a query sees, itself included), if every layer has it (a model
    whose layers mix attention types is refused there)."""
    return layers.native_window(model.config)


def effective_limit(model, cache_limit: int) -> int:
    """The smaller window wins: a native `sliding_window = W` keeps at most W - 1 past positions."""
    window = native_window(model)
    return cache_limit if window is None else min(cache_limit, window - 1)


def config_window(config) -> tuple[Any, Any]:
    """`(cache_limit, num_sink_tokens)` set as fields of a `GenerationConfig` (transformers keeps unknown fields)."""
    return tuple(getattr(config, name, None) for name in _FIELDS) if config is not None else (None, None)


def requested_window(model, generation_config, cache_limit, num_sink_tokens, setting) -> tuple[Any, Any, str]:
    """Each field from the first place that sets it: keyword argument, passed `generation_config`, then the model's
    `generation_config` (unless `set_cache_implementation` chose the model's cache); plus where fields came from."""
    sources = [("", (cache_limit, num_sink_tokens)), ("generation_config", config_window(generation_config))]
    model_fields = config_window(model.generation_config)
    if setting is None:
        sources.append(("model.generation_config", model_fields))
    elif model_fields != (None, None) and (cache_limit, num_sink_tokens) == (None, None):
        warnings.warn(
            f"model.generation_config has cache_limit={model_fields[0]}, num_sink_tokens={model_fields[1]}, but "
            "the model's set_cache_implementation(...) setting chooses its cache, so those fields are ignored.",
            UserWarning,
            stacklevel=3,
        )
    window, used = [None, None], set()
    for source, values in sources:
        for index, value in enumerate(values):
            if window[index] is None and value is not None:
                window[index] = value
                used.add(source)
    return window[0], window[1], " and ".join(sorted(used - {""}))


def _bounded_assistant(assistant) -> bool:
    setting = getattr(assistant, "_cachelimit_setting", None)
    fixed = getattr(setting, "fixed", None)
    return (fixed is not None and fixed.cache_limit is not None) or config_window(assistant.generation_config) != (
        None,
        None,
    )


def check_assistant(generation_config, kwargs) -> None:
    """A bounded cache forgets evicted tokens, so it cannot be rolled back as assisted decoding needs: refuse a
    bounded assistant before any token (`kwargs`: the main model's call), or a bounded run made as an assistant."""
    assistant = kwargs.get("assistant_model")
    if assistant is not None and _bounded_assistant(assistant):
        raise ValueError(
            "`assistant_model` has a bounded cache (cache_limit or set_cache_implementation('window'/'sink')), but "
            "assisted decoding rolls the assistant's cache back, which a bounded cache cannot do: use an assistant "
            "without a cache limit."
        )
    if getattr(generation_config, "is_assistant", False):
        raise ValueError(
            "This model runs as an `assistant_model` with a bounded cache, but assisted decoding rolls the "
            "assistant's cache back, which a bounded cache cannot do: use an assistant without a cache limit."
        )


def _check_continuation(model, cache: BoundedCache, width: int | None) -> None:
    """A returned cache fits only the model (depth, dtype) that filled it, only if its last forward finished, and
    only with inputs that extend what it has seen (`width`: columns of the inputs)."""
    if cache.state is None:
        return
    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    if len(cache.layers) != layers or any(layer.cumulative_length != cache.state.cursor for layer in cache.layers):
        raise ValueError(
            "`past_key_values` was interrupted in the middle of a forward (some layers hold the last tokens, others "
            "do not), so it cannot be continued: start a new generation."
        )
    dtype = cache.layers[0].dtype
    if dtype != model.dtype:
        raise ValueError(
            f"`past_key_values` holds {str(dtype).removeprefix('torch.')} keys but the model runs in "
            f"{str(model.dtype).removeprefix('torch.')}: continue a cache on a model of the same dtype."
        )
    seen = cache.get_seq_length()
    if width is not None and width <= seen:
        raise ValueError(
            f"`past_key_values` has seen {seen} tokens per row but the inputs have only {width}: pass the whole "
            "sequence so far followed by the new tokens (a run interrupted between steps leaves its cache ahead of "
            "the sequences you received: start a new generation)."
        )


def _given_cache(model, family, cache, effective: int, sinks: int, width: int | None) -> BoundedCache:
    """Check a `BoundedCache` passed in (returned by an earlier run, or built by a registered factory)."""
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
    if len(layer_groups(model)) > 1 and not isinstance(cache, LayeredBoundedCache):
        raise ValueError(
            f"`past_key_values` is a single-group BoundedCache, but {type(model).__name__}'s layers differ in "
            "attention type or positions: build the cache with `BoundedCache.from_model(model, cache_limit, ...)`."
        )
    if cache.owner is None:  # a fresh hand-built cache belongs to the first model it runs on
        cache.bind(model)
    cache.check_owner(model)
    if cache.state is None and not any(layer.is_initialized for layer in cache.layers):  # fresh: fit it to the model
        cache.policy = dataclasses.replace(cache.policy, native_window=native_window(model))
        if sinks and cache.rotary is None and family.rotary is not None:
            cache.rotary = family.rotary(model, layer_groups(model)[0].rotary_kind)
    elif cache.policy.native_window != native_window(model):
        raise ValueError(
            f"`past_key_values` was built for sliding_window={cache.policy.native_window}, but this model has "
            f"sliding_window={native_window(model)}: continue a cache only on the model that returned it."
        )
    _check_continuation(model, cache, width)
    return cache


def check_bounded_run(
    model, inputs, generation_config, cache_limit, num_sink_tokens, kwargs, source: str = ""
) -> BoundedCache:
    """Raise on anything a bounded run cannot do; return the cache it will use."""
    config = _resolved_config(model, generation_config, kwargs)
    limit, sinks = check_window(cache_limit, num_sink_tokens, sliding_window=native_window(model), source=source)
    effective = effective_limit(model, limit)
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
        width = getattr(inputs if inputs is not None else kwargs.get("input_ids"), "shape", (0, 0))[-1]
        if width == 1 and CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN:  # 4.x chunks the prompt but its last token
            require("`prefill_chunk_size` with a one-token prompt", "5.0.0")
    if model.config._attn_implementation not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"`cache_limit` supports attn_implementation in {SUPPORTED_ATTENTION}, "
            f"got {model.config._attn_implementation!r}."
        )
    family = family_of(model)
    tokens = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
    mask = kwargs.get("attention_mask")
    if kwargs.get("position_ids") is not None:
        require("`position_ids` in a bounded `generate`", GENERATE_ADVANCES_POSITION_IDS)
    if tokens is not None and sinks and family.rotary is not None:
        check_prompt(tokens.shape[:2], mask, kwargs.get("position_ids"))
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
        rotary = {} if family.rotary is None else {"rotary": family.rotary}  # learned positions: nothing to move
        return bounded_cache_for(model, limit, sinks, window_prefill=window_prefill, **rotary)
    cache = _given_cache(model, family, cache, effective, sinks, None if tokens is None else tokens.shape[1])
    if window_prefill and cache.state is not None:
        require("`prefill_chunk_size` when continuing from a returned cache", CHUNKED_PREFILL_AFTER_A_CACHE)
    cache.set_window_prefill(window_prefill)
    return cache


_RUNS_LOCK = threading.Lock()


@contextlib.contextmanager
def methods_pinned_for_the_run(model) -> Iterator[None]:
    """While a bounded run goes on, `model` itself holds the patched `prepare_inputs_for_generation` (bound to the
    original it wraps), so an `unpatch()` from another thread, or from a callback inside the run, does not change the
    method under the run: it finishes as it started. The last run of the model to end removes it again."""
    original = original_attribute(type(model), "prepare_inputs_for_generation")
    with _RUNS_LOCK:
        runs = vars(model).get("_cachelimit_runs", 0)
        if runs == 0:
            method = make_prepare_inputs(family_of(model).name, original)
            vars(model)["prepare_inputs_for_generation"] = types.MethodType(method, model)
        vars(model)["_cachelimit_runs"] = runs + 1
    try:
        yield
    finally:
        with _RUNS_LOCK:
            vars(model)["_cachelimit_runs"] -= 1
            if not vars(model)["_cachelimit_runs"]:
                del vars(model)["_cachelimit_runs"], vars(model)["prepare_inputs_for_generation"]


def generate(self, inputs=None, generation_config=None, *args, cache_limit=None, num_sink_tokens=None, **kwargs):
    """transformers' `generate`, plus `cache_limit=L` (keep at most L cached positions) and
    `num_sink_tokens=S` (of which the first S real tokens of each row). Without them: unchanged."""
    setting = getattr(self, "_cachelimit_setting", None)
    cache_limit, num_sink_tokens, source = requested_window(
        self, generation_config, cache_limit, num_sink_tokens, setting
    )
    check_assistant(None, kwargs)
    if setting is not None:
        inputs, generation_config, cache_limit, num_sink_tokens, kwargs = setting.apply(
            self, inputs, generation_config, cache_limit, num_sink_tokens, kwargs
        )
    given = passed_cache(kwargs)
    if cache_limit is None and num_sink_tokens is None and isinstance(given, BoundedCache):
        cache_limit, num_sink_tokens = given.policy.limit, given.policy.num_sinks  # continuing a bounded run
        source = "past_key_values"
    original = original_attribute(type(self), "generate")
    if cache_limit is None and num_sink_tokens is None:
        return original(self, inputs, generation_config, *args, **kwargs)
    check_assistant(generation_config, {})
    cache = check_bounded_run(self, inputs, generation_config, cache_limit, num_sink_tokens, kwargs, source)
    kwargs = with_cache(kwargs, cache)
    # The patched `prepare_inputs_for_generation` recognises the `BoundedCache`; the limit is not passed on, so a
    # `generation_config` carrying the same fields cannot swallow it (transformers moves known kwargs into it).
    with methods_pinned_for_the_run(self), attentions_in_sequence_order(self, cache):  # maps in sequence order
        return original(self, inputs, generation_config, *args, **kwargs)


install_on_patch("generate", generate)
