"""The built-in cache kinds of `set_cache_implementation`: one small factory each, and what a factory returns.

Each factory is `factory(model_config, generation_config, **kwargs) -> Cache | GenerateArguments` (see
`hf.cache_setting`, which holds them by name). They only check their arguments and describe the `generate`
call: "window"/"sink" become `cache_limit`/`num_sink_tokens` (the validated bounded machinery), transformers'
own kinds become its `cache_implementation` fields, so transformers sizes those caches per call as natively.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from transformers import GenerationConfig, PretrainedConfig
from transformers.cache_utils import Cache
from transformers.utils import is_hqq_available, is_optimum_quanto_available

from .compat import FP8_QUANTIZED_CACHE, require
from .validation import check_int, check_policy


@dataclass(frozen=True)
class GenerateArguments:
    """What a cache implementation adds to a `generate` call when it does not hand over a cache object.

    `cache_limit`/`num_sink_tokens` turn the call into a bounded run (validated like explicit arguments);
    `generation` holds generation-config fields (such as transformers' own `cache_implementation`);
    `needs_cuda` marks transformers' offloading, which synchronises CUDA streams and fails mid-forward elsewhere;
    `static` allocates a bounded run's ring at its full size with the first forward (`BoundedCache(static=True)`);
    `cache_policy` is a bounded run's policy (`generate(cache_policy=...)`: None for the window).
    """

    cache_limit: int | None = None
    num_sink_tokens: int | None = None
    cache_policy: Any = None
    generation: Mapping[str, Any] = field(default_factory=dict)
    needs_cuda: bool = False
    static: bool = False


CacheFactory = Callable[..., "Cache | GenerateArguments"]


def dynamic(model_config: PretrainedConfig, generation_config: GenerationConfig) -> GenerateArguments:
    """transformers' default `DynamicCache`; setting it removes any earlier setting."""
    return GenerateArguments()


def static(
    model_config: PretrainedConfig, generation_config: GenerationConfig, *, max_cache_len: int | None = None
) -> GenerateArguments:
    """transformers' `StaticCache`, sized per call (or at least `max_cache_len`, to reuse one compiled shape)."""
    generation: dict[str, Any] = {"cache_implementation": "static"}
    if max_cache_len is not None:
        generation["max_cache_len"] = check_int("max_cache_len", max_cache_len, 1)
    return GenerateArguments(generation=generation)


def offloaded(model_config: PretrainedConfig, generation_config: GenerationConfig) -> GenerateArguments:
    """transformers' offloaded `DynamicCache` (layers wait on the CPU while others run): a CUDA model only."""
    return GenerateArguments(generation={"cache_implementation": "offloaded"}, needs_cuda=True)


_QUANTIZATION_PACKAGES = {"quanto": ("optimum-quanto", is_optimum_quanto_available), "hqq": ("hqq", is_hqq_available)}


def quantized(
    model_config: PretrainedConfig,
    generation_config: GenerationConfig,
    *,
    backend: str = "quanto",
    nbits: int | None = None,
    axis_key: int | None = None,
    axis_value: int | None = None,
    q_group_size: int | None = None,
    residual_length: int | None = None,
) -> GenerateArguments:
    """transformers' `QuantizedCache` (backends "quanto", "hqq", "fp8"; unset options keep transformers' defaults).

    The backend's package is an optional dependency: it is looked for here, so a missing one is an `ImportError`
    naming it when the implementation is set, not in the middle of the first `generate`.
    """
    if backend not in ("quanto", "hqq", "fp8"):
        raise ValueError(f"`backend` of the 'quantized' cache must be one of 'quanto', 'hqq', 'fp8', got {backend!r}.")
    if backend in _QUANTIZATION_PACKAGES:
        package, available = _QUANTIZATION_PACKAGES[backend]
        if not available():
            raise ImportError(
                f"The 'quantized' cache with backend={backend!r} needs the `{package}` package: "
                f"`pip install {package}` (or use backend='fp8', which needs nothing more)."
            )
    options = {"nbits": nbits, "axis_key": axis_key, "axis_value": axis_value}
    options.update(q_group_size=q_group_size, residual_length=residual_length)
    options = {name: value for name, value in options.items() if value is not None}
    if backend == "fp8" and options:
        raise ValueError(f"backend='fp8' quantizes per tensor and takes no group-wise options, got {sorted(options)}.")
    if backend == "fp8":
        require("The 'quantized' cache with backend='fp8'", FP8_QUANTIZED_CACHE)
    return GenerateArguments(
        generation={"cache_implementation": "quantized", "cache_config": {"backend": backend, **options}}
    )


def check_static(static) -> bool:
    if not isinstance(static, bool):
        raise TypeError(f"`static` must be a bool, got {type(static).__name__} {static!r}.")
    return static


def window(
    model_config: PretrainedConfig,
    generation_config: GenerationConfig,
    *,
    window_length: int,
    static: bool = False,
    cache_policy: Any = None,
) -> GenerateArguments:
    """A sliding window of `window_length` tokens *counting the new one*: `cache_limit = window_length - 1`.

    The convention is the one of transformers' `sliding_window` (Mistral's `sliding_window=W` and this window
    give the same tokens) and of the former `SinkCache`. `static=True` allocates the ring at its full size with the
    first forward: one shape for every decode step, for `torch.compile` (see `BoundedCache`). `cache_policy`: what
    the bound keeps besides the newest token, as `generate(cache_policy=...)` (a scored policy keeps by score).
    """
    check_int("window_length", window_length, 2)
    return GenerateArguments(
        cache_limit=window_length - 1, static=check_static(static), cache_policy=check_policy(cache_policy)
    )


def sink(
    model_config: PretrainedConfig,
    generation_config: GenerationConfig,
    *,
    window_length: int,
    num_sink_tokens: int,
    static: bool = False,
    cache_policy: Any = None,
) -> GenerateArguments:
    """StreamingLLM: transformers' former `SinkCache(window_length, num_sink_tokens)`, one to one.

    `window_length` counts the new token (`cache_limit = window_length - 1`), of which `num_sink_tokens` are each
    row's first real tokens; at least one recent position must remain besides the sinks. `static`, `cache_policy`:
    as for "window".
    """
    check_int("window_length", window_length, 2)
    check_int("num_sink_tokens", num_sink_tokens, 0, window_length - 2)
    return GenerateArguments(
        cache_limit=window_length - 1,
        num_sink_tokens=num_sink_tokens,
        static=check_static(static),
        cache_policy=check_policy(cache_policy),
    )
