"""Fit a bounded cache to a model: one layer per decoder layer, grouped by attention type, with each layer's rotary.

Read from the model, never from a family list: the attention type and window of every layer (`hf.layer_types`), and
the rotary its keys carry (`layer_rotary_kinds`: one rotary for every layer, one per layer type for Gemma 3, none for
SmolLM3's NoPE layers). Each attention type is one `core.cache.LayerGroup` under its own policy (a sliding layer
keeps min(L, W - 1) positions and applies its window W, a full layer keeps L: `BoundedRequest.kept`); RoPE layers of
a run with sinks move their sink keys with the model's own rotary module and `apply_rotary_pos_emb` (`rotary_shift`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from functools import partial

import torch

from ..core.cache import BoundedCache, LayerGroup
from ..core.layers import BoundedLayer
from ..core.rotary import RotaryShift
from ..core.window import WindowPolicy
from .compat import decoder_body, has_rotary_per_attention_layer, has_separate_local_rotary, require, uses_rope
from .installed import family_of
from .layer_types import attention_kinds, attention_windows
from .request import BoundedRequest

#: (model, rotary kind of a layer) -> the `RotaryShift` that moves its sink keys, or None (no positions)
RotaryFinder = Callable[[torch.nn.Module, "str | None"], "RotaryShift | None"]


def layer_rotary_kinds(model: torch.nn.Module) -> list[str | None]:
    """Per decoder layer: the rotary variant its keys carry (a layer type such as "sliding_attention" for models with
    one rotary per layer type, "" for a single rotary), or None for a layer without positions (SmolLM3's NoPE
    layers, `config.no_rope_layers[i] == 0`)."""
    config = model.config
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    layers = config.num_hidden_layers
    if rotary is None:
        return [None] * layers
    # a rotary that takes a layer type, on a config that names them (5.12's PhiMoE takes one and has no layer_types)
    per_type = "layer_type" in inspect.signature(rotary.forward).parameters and getattr(config, "layer_types", None)
    kinds: list[str | None] = list(config.layer_types) if per_type else [""] * layers
    no_rope = getattr(config, "no_rope_layers", None)
    if no_rope is not None:
        kinds = [kind if uses else None for kind, uses in zip(kinds, no_rope, strict=True)]
    return kinds


def rotary_shift(model: torch.nn.Module, kind: str | None, rotary_at_end: bool = False) -> RotaryShift | None:
    """The `RotaryShift` of the layers of rotary `kind` (see `layer_rotary_kinds`): the rotary module transformers'
    decoders keep at `model.base_model.rotary_emb`, with the `apply_rotary_pos_emb` of that module's own modeling file;
    None for layers without positions (their sink keys stay as written)."""
    if kind is None:
        return None
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    if rotary is None:
        raise ValueError(
            f"{type(model).__name__} has no rotary embedding at `model.base_model.rotary_emb`; attention sinks "
            "need one to move the sink keys (or use num_sink_tokens=0)."
        )
    apply = getattr(sys.modules[type(rotary).__module__], "apply_rotary_pos_emb", None)
    if apply is None:
        raise ValueError(f"{type(rotary).__module__} has no `apply_rotary_pos_emb` to move sink keys with.")
    rope_type = rotary.rope_type[kind] if kind else rotary.rope_type
    cos_sin_at = partial(rotary, layer_type=kind) if kind else rotary
    return RotaryShift(cos_sin_at, apply, model.dtype, rope_type, rotary_at_end)


def model_request(model: torch.nn.Module, request: BoundedRequest) -> BoundedRequest:
    """`request` fitted to the model's attention types (validated against their windows), and checked by the model's
    family against what it cannot serve (its `check_request`: a configuration, or sinks where keys cannot move)."""
    fitted = request.for_windows(attention_windows(model.config))
    check = getattr(family_of(model), "check_request", None)
    if check is not None:
        check(model, fitted)
    return fitted


def fit(cache: BoundedCache, model: torch.nn.Module, request: BoundedRequest, rotary: RotaryFinder | None) -> None:
    """Give `cache` the model's layers: one group per attention type, a `BoundedLayer` per decoder layer, the sink
    keys of RoPE layers moved with `rotary` (None: the family's positions are learned; sinks keep theirs)."""
    request = model_request(model, request)
    kinds = attention_kinds(model.config)
    rotary_kinds = layer_rotary_kinds(model)
    rotaries: dict[str, RotaryShift] = {}
    if request.sinks and rotary is not None and uses_rope(model.config):
        if has_separate_local_rotary(model):
            require(f"`num_sink_tokens` on {type(model).__name__} (one rotary module per layer type)", "5.0.0")
        if has_rotary_per_attention_layer(model):
            require(f"`num_sink_tokens` on {type(model).__name__} (a rotary module in each attention layer)", "5.0.0")
        if all(kind is None for kind in rotary_kinds) and getattr(model.config, "no_rope_layers", None) is None:
            rotary(
                model, ""
            )  # no rotary module found: raise (a rotary model is not NoPE), never keep sinks as written
        rotaries = {kind: rotary(model, kind) for kind in dict.fromkeys(rotary_kinds) if kind is not None}
    groups = {
        name: LayerGroup(name, WindowPolicy(request.kept(window), request.sinks, request.window_prefill, window))
        for name, window in request.windows
    }
    layers = []
    for attention, kind in zip(kinds, rotary_kinds, strict=True):
        group = groups[attention]
        shift = rotaries.get(kind) if kind is not None else None
        if shift is not None:
            group.rotaries[kind] = shift
        layers.append(BoundedLayer(group, shift, kind or ""))
    cache.fit(model, list(groups.values()), layers)


def bounded_cache_for(model: torch.nn.Module, request: BoundedRequest, rotary: RotaryFinder | None) -> BoundedCache:
    """The cache a bounded run of `model` uses, fitted to it (raises a ValueError for what cannot be served)."""
    cache = BoundedCache(request.limit, request.sinks, window_prefill=request.window_prefill)
    fit(cache, model, request, rotary)
    return cache


def rotary_finder(family) -> RotaryFinder | None:
    """How a family's RoPE sink keys are moved (its own finder, or `rotary_shift`); None for learned positions."""
    return (family.rotary or rotary_shift) if family.uses_rope else None


def cache_for_model(
    model, cache_limit: int, num_sink_tokens: int = 0, *, window_prefill: bool = False
) -> BoundedCache:
    """Installed on patched classes for `BoundedCache.from_model`: the cache a bounded `generate` of this model
    builds, validated as `generate` validates it."""
    request = BoundedRequest.from_arguments(cache_limit, num_sink_tokens, window_prefill=window_prefill)
    return bounded_cache_for(model, model_request(model, request), rotary_finder(family_of(model)))
