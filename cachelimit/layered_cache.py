"""Bounded caches for models whose layers differ: per-layer attention types (hybrid) and per-layer positions.

transformers' hybrid models (`config.layer_types`: Gemma 2/3, Qwen2/3 with `max_window_layers`, Cohere 2,
OLMo 3, ...) give each layer full or sliding-window attention; some models also rotate keys differently per
layer (Gemma 3's local and global RoPE bases) or not at all (SmolLM3's NoPE layers). One bounded cache cannot
serve them with one mask and one rotation, so layers are put in *groups* of equal (attention type, rotary): each
group is an ordinary `BoundedCache` with its own policy (a sliding layer keeps min(L, W - 1) positions and
applies its window W, a full layer keeps L) and its own rotary for the sinks, and `LayeredBoundedCache` holds
them behind transformers' `Cache` interface. Every forward is planned once per group; the model receives one
4D mask per attention type, as the dict its hybrid modeling code accepts as `attention_mask`.

`bounded_cache_for` builds the cache `generate` uses (a plain `BoundedCache` when all layers agree).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from .compat import has_separate_local_rotary, require, uses_rope
from .policy import WindowPolicy
from .step_plan import StepPlan, first_forward_is_causal
from .utils.layers import FULL, SLIDING, attention_kinds
from .utils.masks import step_attention_mask
from .utils.rotary import RotaryShift, layer_rotary_kinds, rotary_shift
from .window_cache import BoundedCache, BoundedLayer


@dataclass(frozen=True)
class LayerGroup:
    """Decoder layers that share an attention type and a rotary (so one plan and one sink rotation serve them)."""

    attention: str  # FULL or SLIDING
    rotary_kind: str | None  # see `utils.rotary.layer_rotary_kinds`; None: the layers have no positions
    layers: tuple[int, ...]


def layer_groups(model) -> list[LayerGroup]:
    """The model's layers grouped by (attention type, rotary kind), in the order of their first layer."""
    keys = list(zip(attention_kinds(model.config), layer_rotary_kinds(model), strict=True))
    order = list(dict.fromkeys(keys))
    return [LayerGroup(a, r, tuple(i for i, key in enumerate(keys) if key == (a, r))) for a, r in order]


class LayeredBoundedCache(BoundedCache):
    """A `BoundedCache` made of one `BoundedCache` per `LayerGroup`; see the module docstring.

    `policy` is the full-attention layers' (what `generate` checks a continued cache against); `caches[g]` holds
    group g's layers, its own policy, plan and rotary. `kept_lengths()` is the most any group keeps per row.
    """

    def __init__(
        self,
        limit: int,
        num_sink_tokens: int,
        groups: list[LayerGroup],
        windows: dict[str, int | None],
        rotaries: dict[str | None, RotaryShift | None],
        *,
        window_prefill: bool = False,
    ):
        self.groups = groups
        self.caches: list[BoundedCache] = []
        layers: list[BoundedLayer | None] = [None] * sum(len(group.layers) for group in groups)
        for group in groups:
            window = windows[group.attention]
            kept = limit if window is None else min(limit, window - 1)
            cache = BoundedCache(
                kept,
                num_sink_tokens,
                window_prefill=window_prefill,
                native_window=window,
                rotary=rotaries.get(group.rotary_kind),
            )
            cache.layers = [BoundedLayer(cache) for _ in group.layers]
            for index, layer in zip(group.layers, cache.layers, strict=True):
                layers[index] = layer
            self.caches.append(cache)
        # Groups of one attention type get one mask, so they must lay out their keys alike: where any of them moves
        # its sinks per query (RoPE), the others (layers without positions) copy theirs per query too.
        for group, cache in zip(groups, self.caches, strict=True):
            cache.per_query_sinks = any(
                other.rotary is not None
                for kind, other in zip(groups, self.caches, strict=True)
                if kind.attention == group.attention
            )
        self.policy = WindowPolicy(limit, num_sink_tokens, window_prefill, None)
        # any group's rotary: tells callers that sink keys are moved (the per-group ones do the moving)
        self.rotary = next((cache.rotary for cache in self.caches if cache.rotary is not None), None)
        self.plan: StepPlan | None = None
        self.owner = None
        Cache.__init__(self, layers=layers)

    @property
    def state(self):
        return self.caches[0].state

    def set_window_prefill(self, window_prefill: bool) -> None:
        for cache in self.caches:
            cache.set_window_prefill(window_prefill)
        self.policy = dataclasses.replace(self.policy, window_prefill=window_prefill)

    def begin_step(self, new_real: torch.Tensor) -> StepPlan:
        """Plan the next forward for every group; the returned plan's positions are every group's."""
        first_causal = all(
            first_forward_is_causal(0 if cache.state is None else cache.state.cursor, cache.policy, new_real.shape[1])
            for cache in self.caches
        )  # the model builds every layer type's mask from one 2D mask, so all groups decide alike
        for cache in self.caches:
            cache.model_mask = first_causal
        plans = [cache.begin_step(new_real) for cache in self.caches]
        self.plan = plans[0]
        return self.plan

    def layer_type_masks(self, config, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The step's 4D mask for each attention type (groups of one type plan the same visibility)."""
        masks: dict[str, torch.Tensor] = {}
        for group, cache in zip(self.groups, self.caches, strict=True):
            if group.attention not in masks:
                masks[group.attention] = step_attention_mask(config, cache.plan, dtype)
        return masks

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        for cache in self.caches:
            cache.reorder_cache(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for cache in self.caches:
            cache.batch_select_indices(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        for cache in self.caches:
            cache.batch_repeat_interleave(repeats)

    def reset(self) -> None:
        for cache in self.caches:
            cache.reset()
        self.plan = None

    def kept_lengths(self) -> torch.Tensor:
        """Real positions each row keeps, in the group that keeps the most (at most `limit`)."""
        return torch.stack([cache.kept_lengths() for cache in self.caches]).amax(0)

    def kept_lengths_by_type(self) -> dict[str, torch.Tensor]:
        return {group.attention: cache.kept_lengths() for group, cache in zip(self.groups, self.caches, strict=True)}


def bounded_cache_for(
    model,
    cache_limit: int,
    num_sink_tokens: int = 0,
    *,
    window_prefill: bool = False,
    rotary: Callable[..., RotaryShift | None] = rotary_shift,
) -> BoundedCache:
    """The cache a bounded run of `model` uses: a `BoundedCache` when every layer has the same attention type and
    rotary, else a `LayeredBoundedCache`. `rotary(model, kind)` moves the sink keys of layers of rotary `kind`
    (RoPE models with sinks only). Raises a ValueError for what cannot be served exactly."""
    config = model.config
    groups = layer_groups(model)
    kinds = {group.attention for group in groups}
    unknown = sorted(kinds - {FULL, SLIDING})
    if unknown:
        raise ValueError(f"`cache_limit` supports layers of types {FULL!r} and {SLIDING!r}; this model has {unknown}.")
    window = getattr(config, "sliding_window", None)
    if SLIDING in kinds and (not isinstance(window, int) or window < 1):
        raise ValueError(f"config.layer_types asks for sliding attention but config.sliding_window={window!r}.")
    windows = {FULL: None, SLIDING: window}
    smallest = min(cache_limit if windows[kind] is None else min(cache_limit, windows[kind] - 1) for kind in kinds)
    if num_sink_tokens >= smallest:
        raise ValueError(
            f"`num_sink_tokens` must be an int in [0, {smallest - 1}] (below the effective cache limit {smallest} "
            f"of every layer: sliding_window={window} keeps at most {window - 1 if window else cache_limit}), "
            f"got {num_sink_tokens}."
        )
    kept = {cache_limit if windows[kind] is None else min(cache_limit, windows[kind] - 1) for kind in kinds}
    if num_sink_tokens and len(kept) > 1:
        raise ValueError(
            f"`num_sink_tokens` on a model whose layer types keep different windows (sliding_window={window} keeps "
            f"{min(kept)} positions, cache_limit={cache_limit} keeps {max(kept)}) is not supported yet: use "
            f"cache_limit <= {window - 1} with sinks, or num_sink_tokens=0."
        )
    rotaries = {}
    if num_sink_tokens and uses_rope(config):
        if has_separate_local_rotary(model):
            require(f"`num_sink_tokens` on {type(model).__name__} (one rotary module per layer type)", "5.0.0")
        rotaries = {group.rotary_kind: rotary(model, group.rotary_kind) for group in groups}
    if len(groups) == 1:
        cache = BoundedCache(
            smallest,
            num_sink_tokens,
            window_prefill=window_prefill,
            native_window=windows[groups[0].attention],
            rotary=rotaries.get(groups[0].rotary_kind),
        )
    else:
        cache = LayeredBoundedCache(
            cache_limit, num_sink_tokens, groups, windows, rotaries, window_prefill=window_prefill
        )
    cache.bind(model)  # built from this model's rotary and windows: it continues only there
    return cache


BoundedCache.model_cache_builder = staticmethod(bounded_cache_for)
