"""One API for every cache kind: `model.set_cache_implementation(name, **kwargs)`, then plain `generate()`.

The registry is a plain dict, `CACHE_IMPLEMENTATIONS`, from a name to a *factory*:

    factory(model_config, generation_config, **kwargs) -> Cache | GenerateArguments

called once per `generate` call (so every call gets a fresh cache) with the model's config, the generation config
of that call (the model's defaults updated by the call's `generation_config` and keyword arguments) and the keyword
arguments given to `set_cache_implementation`. A factory returns either a transformers `Cache` (used as that call's
`past_key_values`; a `Cache` subclass taking these arguments works as a factory too) or `GenerateArguments`: what
to add to the `generate` call instead. The built-in names return `GenerateArguments`, so that "window"/"sink" run
through the validated bounded machinery (`cache_limit`, `num_sink_tokens`) and the transformers names are built by
transformers itself, sized for each call's batch, beams and length exactly as natively.

The built-in factories live in `cachelimit.hf.cache_kinds`. Keyword arguments are checked against the factory's
signature when the implementation is set, not when it is used, so a typo fails at the line that made it. The setting
lives on the model instance (`setting_of`); the `generate` wrapper asks it, once per call, what the call should use
(`CacheSetting.apply`).
"""

from __future__ import annotations

import copy
import difflib
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from transformers.cache_utils import Cache

from ..core.cache import BoundedCache
from .cache_kinds import (
    CacheFactory,
    GenerateArguments,
    dynamic,
    offloaded,
    quantized,
    sink,
    static,
    window,
)
from .compat import passed_cache, with_cache
from .generation_config import resolved_config
from .installed import family_of
from .layout import model_request
from .request import BoundedRequest

CACHE_IMPLEMENTATIONS: dict[str, CacheFactory] = {
    "dynamic": dynamic,
    "static": static,
    "offloaded": offloaded,
    "quantized": quantized,
    "window": window,
    "sink": sink,
}

#: Built-in factories are pure and cheap: they run once at set time to check values, not only names.
_BUILT_IN = frozenset(CACHE_IMPLEMENTATIONS.values())


def register_cache_implementation(name: str, factory: CacheFactory) -> CacheFactory:
    """Add (or replace) `name` in `CACHE_IMPLEMENTATIONS`; returns `factory`.

    `factory(model_config, generation_config, **kwargs)` must return a `Cache` or `GenerateArguments`; its keyword
    parameters are the ones `set_cache_implementation(name, ...)` accepts.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty str, got {name!r}.")
    if not callable(factory):
        raise TypeError(f"`factory` for {name!r} must be callable (model_config, generation_config, **kwargs).")
    try:
        inspect.signature(factory).bind_partial(None, None)
    except TypeError:
        raise TypeError(
            f"`factory` for {name!r} is called as factory(model_config, generation_config, **kwargs), but it does "
            "not take two positional arguments."
        ) from None
    except ValueError:  # no signature to read (some builtins): checked when called
        pass
    CACHE_IMPLEMENTATIONS[name] = factory
    return factory


def _factory_for(name: str) -> CacheFactory:
    """The registered factory; an unknown name is an error (never a silent dynamic cache) with the nearest name."""
    if name in CACHE_IMPLEMENTATIONS:
        return CACHE_IMPLEMENTATIONS[name]
    names = sorted(CACHE_IMPLEMENTATIONS)
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"Unknown cache implementation {name!r}; valid names: {names}.{hint}")


def _check_arguments(name: str, factory: CacheFactory, kwargs: dict[str, Any]) -> None:
    """Bind the keyword arguments to the factory's signature now, so a missing or unexpected one fails early."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have no signature: they are checked when called
        return
    try:
        signature.bind(None, None, **kwargs)
    except TypeError as error:
        parameters = list(signature.parameters.values())[2:]
        accepted = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        raise TypeError(
            f"set_cache_implementation({name!r}): {error}; {name!r} takes keyword arguments {accepted}."
        ) from None


def _with_generation(generation_config, kwargs: dict[str, Any], fields: Mapping[str, Any]):
    """Add generation-config fields the way the caller passed the others (transformers warns on a mix)."""
    if generation_config is None:
        return None, {**kwargs, **fields}
    generation_config = copy.deepcopy(generation_config)
    generation_config.update(**fields)
    return generation_config, kwargs


def _describe(name: str, kwargs: Mapping[str, Any]) -> str:
    arguments = "".join(f", {key}={value!r}" for key, value in kwargs.items())
    return f"set_cache_implementation({name!r}{arguments})"


@dataclass(frozen=True)
class CacheSetting:
    """A model instance's chosen cache implementation; `generate` calls `apply` before every run."""

    name: str
    factory: CacheFactory
    kwargs: Mapping[str, Any]
    #: what a built-in factory returned at set time (pure, so reused); None for custom factories (called per run)
    fixed: GenerateArguments | None = None

    def policy_for_run(self, cache_limit) -> Any:
        """The setting's `cache_policy` for a run whose limit `apply` gave as `cache_limit` (None unless it is the
        setting's own bounded run)."""
        fixed = self.fixed
        return fixed.cache_policy if fixed is not None and cache_limit == fixed.cache_limit else None

    def _ignored(self, reason: str) -> None:
        warnings.warn(
            f"{reason}, so the model's {_describe(self.name, self.kwargs)} is ignored for this call.",
            UserWarning,
            stacklevel=4,
        )

    def _same_window(self, cache: BoundedCache, cache_limit, num_sink_tokens) -> bool:
        """Continuing a cache of this setting's window (the call may repeat the window too): nothing is ignored."""
        fixed = self.fixed or GenerateArguments()
        window = (fixed.cache_limit, fixed.num_sink_tokens or 0)
        if fixed.cache_limit is None or (cache_limit, num_sink_tokens or 0) not in ((None, 0), window):
            return False
        return (cache.policy.limit, cache.policy.num_sinks) == window

    def apply(self, model, inputs, generation_config, cache_limit, num_sink_tokens, kwargs):
        """Return `generate`'s (inputs, generation_config, cache_limit, num_sink_tokens, static, kwargs) for this run
        (`static`: a bounded run's ring is allocated at its full size, `GenerateArguments.static`). The setting's
        `cache_policy` is `policy_for_run`'s.

        Anything the call says explicitly about its cache wins over the model-level setting (with a warning when
        they disagree): a call is never silently run with a cache other than the one it asked for.
        """
        unchanged = (inputs, generation_config, cache_limit, num_sink_tokens, False, kwargs)
        fixed = self.fixed or GenerateArguments()
        given = passed_cache(kwargs)
        if given is not None:
            if not (isinstance(given, BoundedCache) and self._same_window(given, cache_limit, num_sink_tokens)):
                self._ignored("`past_key_values` was passed to generate and that cache is used")
            return unchanged
        if cache_limit is not None or num_sink_tokens is not None:
            if (cache_limit, num_sink_tokens or 0) != (fixed.cache_limit, fixed.num_sink_tokens or 0):
                self._ignored(f"generate got cache_limit={cache_limit}, num_sink_tokens={num_sink_tokens}")
            return unchanged
        config = resolved_config(model, generation_config, kwargs)
        if config.cache_implementation is not None:
            if config.cache_implementation != fixed.generation.get("cache_implementation"):
                self._ignored(f"the generation config asks for cache_implementation={config.cache_implementation!r}")
            return unchanged
        built = self.fixed if self.fixed is not None else self.factory(model.config, config, **self.kwargs)
        if isinstance(built, Cache):
            return inputs, generation_config, None, None, False, with_cache(kwargs, built)
        if not isinstance(built, GenerateArguments):
            raise TypeError(
                f"The factory of cache implementation {self.name!r} returned {type(built).__name__}; it must "
                "return a transformers Cache or cachelimit.GenerateArguments."
            )
        if built.needs_cuda and model.device.type != "cuda":
            raise ValueError(
                f"Cache implementation {self.name!r} offloads layers from a CUDA device to the CPU (transformers "
                f"synchronises CUDA streams for it), but the model is on {model.device.type!r}: move it to CUDA."
            )
        if built.generation:
            generation_config, kwargs = _with_generation(generation_config, kwargs, built.generation)
        return inputs, generation_config, built.cache_limit, built.num_sink_tokens, built.static, kwargs


def _check_bounded(model, name: str, arguments: GenerateArguments) -> None:
    """A bounded setting is checked against the model now: a sink count must leave room in every layer type's window
    (a native `sliding_window` can keep fewer positions than the limit)."""
    if arguments.cache_limit is not None:
        source = f"set_cache_implementation({name!r})"
        model_request(
            model,
            BoundedRequest.from_arguments(
                arguments.cache_limit, arguments.num_sink_tokens, source=source, cache_policy=arguments.cache_policy
            ),
        )


#: the model-instance attribute that holds its `CacheSetting`
SETTING_ATTRIBUTE = "_cachelimit_setting"


def setting_of(model) -> CacheSetting | None:
    """The cache implementation `set_cache_implementation` chose for this model instance (None: transformers')."""
    return getattr(model, SETTING_ATTRIBUTE, None)


def set_cache_implementation(model, name: str, **kwargs: Any) -> None:
    """Choose the cache every later `generate` of this model instance uses (other instances are unaffected).

    Calling it again replaces the setting; "dynamic" restores transformers' default. Unknown names, missing or
    unexpected keyword arguments and (for the built-in names) bad values raise here, leaving the setting as it was.
    """
    family_of(model)  # a model whose class is not patched would silently ignore the setting
    factory = _factory_for(name)
    _check_arguments(name, factory, kwargs)
    fixed = None
    if factory in _BUILT_IN:
        fixed = factory(model.config, model.generation_config, **kwargs)
        _check_bounded(model, name, fixed)
    setattr(model, SETTING_ATTRIBUTE, None if factory is dynamic else CacheSetting(name, factory, dict(kwargs), fixed))
