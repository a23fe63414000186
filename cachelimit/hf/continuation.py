"""A `BoundedCache` handed to `generate`: continue it only where that is exact, fit it if it is fresh.

A returned cache (`return_dict_in_generate=True`) continues exactly as one long call would, but only on the model
that filled it (the same object, in the same dtype: `check_owner`), only if its last forward finished,
and only with inputs that extend what it has seen. A fresh cache built by hand (`BoundedCache(limit, sinks)`, or by a
registered cache factory) is fitted to the model here, as `generate` would build it.
"""

from __future__ import annotations

from transformers.cache_utils import Cache

from ..core.cache import BoundedCache
from .layout import RotaryFinder, fit
from .request import BoundedRequest


def given_cache(
    model, cache, request: BoundedRequest, rotary: RotaryFinder | None, width: int | None, rotary_layers=None
) -> BoundedCache:
    """Check the cache a bounded call was given (`width`: columns of its inputs); returns it, fitted."""
    if not isinstance(cache, BoundedCache):
        kind = type(cache).__name__ if isinstance(cache, Cache) else repr(type(cache))
        raise ValueError(
            f"`cache_limit` continues only from a cachelimit.BoundedCache (the `past_key_values` a bounded "
            f"`generate` returns), got {kind}."
        )
    if (cache.policy.limit, cache.policy.num_sinks) != (request.limit, request.sinks):
        raise ValueError(
            f"The given cache was built with cache_limit={cache.policy.limit}, num_sink_tokens="
            f"{cache.policy.num_sinks}; this call asks for cache_limit={request.limit}, num_sink_tokens={request.sinks}."
        )
    if cache.cache_policy != request.policy:
        raise ValueError(
            f"The given cache keeps by cache_policy={cache.cache_policy!r}; this call asks for "
            f"cache_policy={request.policy!r}: continue a cache under the policy it was filled with."
        )
    if not cache.fitted:  # built by hand: it belongs to the first model it runs on
        fit(cache, model, request, rotary, rotary_layers)
    check_owner(cache, model)
    check_continuation(model, cache, width)
    return cache


def check_owner(cache: BoundedCache, model) -> None:
    """Refuse (ValueError) a model other than the one `cache` was fitted to: other weights give other keys for the
    same tokens, other shapes fail inside the forward."""
    owner = None if cache.owner is None else cache.owner()
    if owner is model:
        return
    if owner is None:
        raise ValueError(
            "`past_key_values` was built for or filled by another model, which no longer exists: continue a "
            "cache only on the model that filled it (or start a new generation)."
        )
    raise ValueError(
        f"`past_key_values` was built for or filled by another model ({type(owner).__name__} at {id(owner):#x}), "
        f"not this {type(model).__name__} at {id(model):#x}: continue a cache only on the model that filled it "
        "(its keys and values are that model's)."
    )


def check_continuation(model, cache: BoundedCache, width: int | None) -> None:
    """A cache that has run continues only if its last forward finished in every layer, in the model's dtype, with
    inputs longer than what it has seen."""
    cursor = cache.cursor
    if cursor is None:
        return
    cache.settle()  # what compiled forwards wrote, counted per layer
    if any(layer.cumulative_length != cursor for layer in cache.bounded_layers):
        raise ValueError(
            "`past_key_values` was interrupted in the middle of a forward (some layers hold the last tokens, others "
            "do not), so it cannot be continued: start a new generation."
        )
    dtype = next((layer.dtype for layer in cache.bounded_layers if layer.is_initialized), model.dtype)
    if dtype != model.dtype:
        raise ValueError(
            f"`past_key_values` holds {str(dtype).removeprefix('torch.')} keys but the model runs in "
            f"{str(model.dtype).removeprefix('torch.')}: continue a cache on a model of the same dtype."
        )
    if width is not None and width <= cursor:
        raise ValueError(
            f"`past_key_values` has seen {cursor} tokens per row but the inputs have only {width}: pass the whole "
            "sequence so far followed by the new tokens (a run interrupted between steps leaves its cache ahead of "
            "the sequences you received: start a new generation)."
        )
