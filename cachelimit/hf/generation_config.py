"""Where a `generate` call's settings come from: its keyword arguments, the `generation_config` it passes, the model's
own `generation_config` (saved in generation_config.json), resolved the way transformers resolves them.

Shared by the `generate` wrapper and the cache kinds of `set_cache_implementation`, so that both read a call the same
way: `cache_limit` and `num_sink_tokens` may be set as generation-config fields (transformers keeps unknown fields).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from transformers import GenerationConfig

from .compat import fill_generation_defaults

FIELDS = ("cache_limit", "num_sink_tokens")


def resolved_config(model, generation_config, kwargs) -> GenerationConfig:
    """The generation config `generate` will use (model defaults, then the given config, then kwargs)."""
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    # Like transformers: a passed config is completed by the model's own defaults, then the kwargs win.
    fill_generation_defaults(config, model.generation_config.to_dict())
    config.update(**{key: value for key, value in kwargs.items() if hasattr(config, key)})
    return config


def config_window(config) -> tuple[Any, Any]:
    """`(cache_limit, num_sink_tokens)` set as fields of a `GenerationConfig` (None where unset)."""
    return tuple(getattr(config, name, None) for name in FIELDS) if config is not None else (None, None)


def requested_window(model, generation_config, cache_limit, num_sink_tokens, has_setting: bool):
    """`(cache_limit, num_sink_tokens, source)`: each field from the first place that sets it (keyword argument,
    passed `generation_config`, then the model's `generation_config` unless a `set_cache_implementation` setting
    chooses the model's cache), and where the fields came from (for the error messages)."""
    sources = [("", (cache_limit, num_sink_tokens)), ("generation_config", config_window(generation_config))]
    model_fields = config_window(model.generation_config)
    if not has_setting:
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


def requested_policy(model, generation_config, cache_policy, has_setting: bool):
    """`cache_policy` from the first place that sets it: the keyword argument, the passed `generation_config`, then
    the model's own `generation_config` (unless a `set_cache_implementation` setting chooses the model's cache)."""
    if cache_policy is not None:
        return cache_policy
    places = [generation_config] + ([] if has_setting else [model.generation_config])
    return next((value for place in places if (value := getattr(place, "cache_policy", None)) is not None), None)
