"""cachelimit as a transformers `custom_generate` recipe: a bounded KV cache on a model nobody patched.

    model.generate(ids, custom_generate=PATH, trust_remote_code=True, cache_limit=1024, num_sink_tokens=4)
    model.generate(ids, custom_generate=PATH, trust_remote_code=True, window_length=1025, num_sink_tokens=4)

`PATH` is the folder that holds this `custom_generate/` directory (this repository's root, or a Hub repo laid out
the same way). Why this path exists: `custom_generate` is how transformers now ships decoding extensions (its own
`SinkCache` moved to the `transformers-community/sink_cache` repo, which fails on transformers >= 5.12), so a user
of that repo gets a drop-in that keeps its arguments and serves every family cachelimit serves, exactly.

What it does: it patches the model's family for the duration of this one call (`cachelimit.patched`), runs the
ordinary `generate` with every argument transformers handed over, and unpatches afterwards, so the model (and its
class) is left as it was: patched only if you had patched it yourself. All the checks and refusals are cachelimit's
own (docs/semantics.md): a bad value is a ValueError/TypeError naming the argument, before any token.

`window_length` is the old `sink_cache` repo's and transformers' `set_cache_implementation("sink"|"window", ...)`
spelling: it counts the new token, so `cache_limit = window_length - 1`; it is checked by those same cache kinds.
Give `cache_limit` or `window_length`, not both. A call with neither uses a limit set in the generation config
(`GenerationConfig(cache_limit=L)`) or carried by a returned cache passed back to continue it
(docs/semantics.md, "Continuation"), and is refused if there is none: this recipe exists to bound the cache.
"""

from __future__ import annotations

import cachelimit


def _window_arguments(window_length, cache_limit, num_sink_tokens) -> dict:
    """`cache_limit`/`num_sink_tokens` for the bounded `generate` (None: not set here)."""
    if window_length is None:
        return {"cache_limit": cache_limit, "num_sink_tokens": num_sink_tokens}
    if cache_limit is not None:
        raise ValueError(
            f"Give `cache_limit` or `window_length`, not both (got cache_limit={cache_limit!r}, "
            f"window_length={window_length!r}): `window_length` counts the new token, cache_limit = window_length - 1."
        )
    if num_sink_tokens is None:
        kind = cachelimit.CACHE_IMPLEMENTATIONS["window"](None, None, window_length=window_length)
    else:
        kind = cachelimit.CACHE_IMPLEMENTATIONS["sink"](
            None, None, window_length=window_length, num_sink_tokens=num_sink_tokens
        )
    return {"cache_limit": kind.cache_limit, "num_sink_tokens": kind.num_sink_tokens}


def _already_bounded(model, kwargs: dict) -> bool:
    """A limit the call carries elsewhere: in a generation config, or a `BoundedCache` passed to continue (or built
    by cachelimit's own `generate` when the family was already patched, which then calls this recipe)."""
    configs = (kwargs.get("generation_config"), model.generation_config)
    if any(getattr(config, "cache_limit", None) is not None for config in configs):
        return True
    return any(isinstance(kwargs.get(name), cachelimit.BoundedCache) for name in ("past_key_values", "cache"))


def generate(model, *args, window_length=None, cache_limit=None, num_sink_tokens=None, **kwargs):
    """`model.generate(*args, **kwargs)` with the KV cache bounded (see the module docstring)."""
    window = _window_arguments(window_length, cache_limit, num_sink_tokens)
    unset = window["cache_limit"] is None and window["num_sink_tokens"] is None
    if unset and not _already_bounded(model, kwargs):
        raise ValueError(
            "custom_generate=cachelimit bounds the KV cache: give `cache_limit=L` (keep L positions per layer) or "
            "`window_length=W` (cache_limit = W - 1), optionally with `num_sink_tokens=S`."
        )
    window = {name: value for name, value in window.items() if value is not None}
    with cachelimit.patched(model.config.model_type):  # an unsupported family: ValueError listing the supported
        return model.generate(*args, **window, **kwargs)
