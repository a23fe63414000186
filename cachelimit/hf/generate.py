"""The `generate` installed on patched classes: find out whether a call is a bounded run, validate it, then hand it
to transformers.

A call is bounded when it says so: `cache_limit`/`num_sink_tokens` as keyword arguments, as fields of the
`generation_config` it passes or of the model's own `generation_config` (`hf.generation_config`), through
`set_cache_implementation` (`hf.cache_setting`), or by passing a `BoundedCache` (continuing a bounded run). The
arguments become one `BoundedRequest`, every check runs before any token is generated (`hf.run_checks`,
`hf.continuation`), and the run itself is transformers' own `generate` with a `BoundedCache` as its cache (the
patched `prepare_inputs_for_generation`, `hf.prepare`, recognises that cache).
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass

from ..core.cache import BoundedCache
from .attention_maps import attentions_in_sequence_order
from .attention_scores import scoring_attention
from .cache_setting import setting_of
from .compat import CHUNKED_PREFILL_AFTER_A_CACHE, passed_cache, require, with_cache
from .continuation import given_cache
from .generation_config import requested_policy, requested_window, resolved_config
from .installed import family_of, original_attribute
from .layout import bounded_cache_for, check_family, model_request, rotary_finder
from .prepare import forwards_embeds, prepare_calling
from .recurrent_state import check_multi_token_continuation
from .request import BoundedRequest
from .run_checks import Run, check_assistant, check_run


def bounded_cache(
    model,
    inputs,
    generation_config,
    cache_limit,
    num_sink_tokens,
    kwargs,
    source: str = "",
    static: bool = False,
    cache_policy=None,
) -> BoundedCache:
    """Validate a bounded run (raising before any token on anything it cannot do); return the cache it will use. A
    chunked prefill with RoPE sinks is read in smaller chunks (`prefill_chunk`, put in `kwargs`)."""
    config = resolved_config(model, generation_config, kwargs)
    window_prefill = config.prefill_chunk_size is not None
    request = BoundedRequest.from_arguments(
        cache_limit, num_sink_tokens, window_prefill=window_prefill, source=source, cache_policy=cache_policy
    )
    if request.policy is not None and config.output_attentions:
        raise ValueError(
            f"`output_attentions=True` cannot be served with cache_policy={request.policy.name!r}: each head keeps "
            "its own positions in no sequence order, so the maps would not show positions. Use the window."
        )
    family = family_of(model)
    check_family(model, family)
    request = model_request(model, request)
    tokens = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
    check_run(Run(model, family, request, config, kwargs, tokens, kwargs.get("attention_mask")))
    cache, rotary = passed_cache(kwargs), rotary_finder(family)
    width = None if tokens is None else tokens.shape[1]
    if cache is None:
        check_multi_token_continuation(model, 0, width, config.prefill_chunk_size)
        cache = bounded_cache_for(model, request, rotary, family.rotary_layers, static=static)
    else:
        cache = given_cache(model, cache, request, rotary, width, family.rotary_layers)
        if window_prefill and cache.cursor is not None:
            require("`prefill_chunk_size` when continuing from a returned cache", CHUNKED_PREFILL_AFTER_A_CACHE)
        check_multi_token_continuation(model, cache.cursor or 0, width, config.prefill_chunk_size)
        cache.set_window_prefill(window_prefill)
    cache.compile_requested = config.compile_config is not None
    cache.generated_from = user_columns(tokens, kwargs.get("attention_mask"))
    chunk = prefill_chunk(cache, config)
    if chunk != config.prefill_chunk_size:
        kwargs["prefill_chunk_size"] = chunk
    return cache


def prefill_chunk(cache: BoundedCache, config) -> int | None:
    """The `prefill_chunk_size` transformers' chunked prefill reads the prompt in: the one asked for, or, with RoPE
    sinks, the smaller chunk at which their per-query copies cost little (`WindowPolicy.sink_chunk`: the same
    result, within the memory bound asked for). Not when the caller asks for the prefill's attention maps or hidden
    states: `generate` returns those of the last chunk, so that chunk stays the one asked for. Nor under a scored
    `cache_policy`: each chunk is read, then cut to the best `L` (`core.scored`), so its result depends on the
    chunk, which stays the one asked for."""
    asked = config.prefill_chunk_size
    if asked is None or not cache.rotates_sinks or config.output_attentions or config.output_hidden_states:
        return asked
    if cache.cache_policy is not None:
        return asked
    return min(group.policy.sink_chunk(asked) for group in cache.groups if group.rotates_sinks)


def user_columns(tokens, attention_mask) -> int | None:
    """Columns the caller's inputs cover (the rest of the run is tokens `generate` appends, whose mask columns are
    ones: `BoundedCache.is_generated`); None when unknown (every step then reads its mask)."""
    widths = [t.shape[1] for t in (tokens, attention_mask) if t is not None and t.dim() >= 2]
    return max(widths) if widths else None


_RUNS_LOCK = threading.Lock()


@dataclass
class _Pin:
    """The bounded runs going on on one model instance, and whether the pinned method is cachelimit's to remove."""

    runs: int
    ours: bool


@contextlib.contextmanager
def methods_pinned_for_the_run(model) -> Iterator[None]:
    """While a bounded run goes on, `model` itself holds the patched `prepare_inputs_for_generation` (bound to the
    original it wraps), so an `unpatch()` from another thread, or from a callback inside the run, does not change the
    method under the run: it finishes as it started. The last run of the model to end removes it again. A method the
    caller has set on the instance itself (a wrapper of their own) is theirs: it is left as it is."""
    original = original_attribute(type(model), "prepare_inputs_for_generation")
    with _RUNS_LOCK:
        pin = vars(model).get("_cachelimit_pin")
        if pin is None:
            pin = _Pin(0, "prepare_inputs_for_generation" not in vars(model))
            if pin.ours:
                calling = prepare_calling(original, embeds=forwards_embeds(original))
                vars(model)["prepare_inputs_for_generation"] = types.MethodType(calling, model)
            vars(model)["_cachelimit_pin"] = pin
        pin.runs += 1
    try:
        yield
    finally:
        with _RUNS_LOCK:
            pin.runs -= 1
            if not pin.runs:
                del vars(model)["_cachelimit_pin"]
                if pin.ours:
                    del vars(model)["prepare_inputs_for_generation"]


def generate(
    self,
    inputs=None,
    generation_config=None,
    *args,
    cache_limit=None,
    num_sink_tokens=None,
    cache_policy=None,
    **kwargs,
):
    """transformers' `generate`, plus `cache_limit=L` (keep at most L cached positions), `num_sink_tokens=S` (of
    which the first S real tokens of each row) and `cache_policy` (what else is kept: the window by default, or a
    scored policy such as "keydiff", `cachelimit.core.eviction`). Without them: unchanged."""
    setting = setting_of(self)
    cache_policy = requested_policy(self, generation_config, cache_policy, setting is not None)
    cache_limit, num_sink_tokens, source = requested_window(
        self, generation_config, cache_limit, num_sink_tokens, setting is not None
    )
    check_assistant(None, kwargs)
    static = False
    if setting is not None:
        inputs, generation_config, cache_limit, num_sink_tokens, static, kwargs = setting.apply(
            self, inputs, generation_config, cache_limit, num_sink_tokens, kwargs
        )
        cache_policy = cache_policy if cache_policy is not None else setting.policy_for_run(cache_limit)
    given = passed_cache(kwargs)
    if cache_limit is None and num_sink_tokens is None and isinstance(given, BoundedCache):
        cache_limit, num_sink_tokens = given.policy.limit, given.policy.num_sinks  # continuing a bounded run
        cache_policy = given.cache_policy if cache_policy is None else cache_policy
        source = "past_key_values"
    original = original_attribute(type(self), "generate")
    if cache_limit is None and num_sink_tokens is None:
        if cache_policy is not None:
            raise ValueError("`cache_policy` needs `cache_limit`: a policy chooses what a bounded cache keeps.")
        return original(self, inputs, generation_config, *args, **kwargs)
    check_assistant(generation_config, {})
    cache = bounded_cache(
        self, inputs, generation_config, cache_limit, num_sink_tokens, kwargs, source, static, cache_policy
    )
    kwargs = with_cache(kwargs, cache)
    # The patched `prepare_inputs_for_generation` recognises the `BoundedCache`; the limit is not passed on, so a
    # `generation_config` carrying the same fields cannot swallow it (transformers moves known kwargs into it).
    # maps in sequence order; a query-scored policy's scores taken in the attention calls
    with methods_pinned_for_the_run(self), attentions_in_sequence_order(self, cache), scoring_attention(self, cache):
        try:
            output = original(self, inputs, generation_config, *args, **kwargs)
        finally:
            cache.settle()  # count what compiled forwards wrote (exact per layer, also after an exception)
    cache.check_generated_columns()
    return output
