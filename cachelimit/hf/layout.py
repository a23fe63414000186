"""Fit a bounded cache to a model: one layer per decoder layer, attention layers grouped by type, each with its rotary.

Read from the model, never from a family list: what every layer caches (`hf.layer_types`: a bounded attention type
and its native window or chunk, a recurrent state left to transformers' own cache layer, nothing for a KV-sharing
consumer), and the rotary its keys carry (`layer_rotary_kinds`: one rotary for every layer, one per layer type for
Gemma 3/4 and OLMo 3, none for NoPE layers). Each attention type is one `core.cache.LayerGroup` under its own policy
(`BoundedRequest.kept`); RoPE layers of a run with sinks move their sink keys with the model's own rotary module and
rotation function (`rotary_shift`; a family whose rotation is called another way passes its own finder).
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
from ..core.scored import ScoredPolicy
from ..core.scored_layer import ScoredLayer
from ..core.window import WindowPolicy
from .cache_layers import hybrid_layer_class, own_layer
from .compat import MLA_CACHES_LATENT, decoder_body, require, rotaries_apart, uses_rope
from .installed import family_of
from .layer_types import CHUNKED, RECURRENT, attention_windows, layer_kinds
from .request import BoundedRequest

#: (model, rotary kind of a layer) -> the `RotaryShift` that moves its sink keys, or None (no positions)
RotaryFinder = Callable[[torch.nn.Module, "str | None"], "RotaryShift | None"]
#: model -> per decoder layer, the rotary kind its keys carry (see `layer_rotary_kinds`), for a family whose model does
#: not say it the default way (Cohere 2 rotates its sliding layers only, Granite SWA has one rotary per base)
RotaryLayers = Callable[[torch.nn.Module], "list[str | None]"]


def layer_rotary_kinds(model: torch.nn.Module, rotary_layers: RotaryLayers | None = None) -> list[str | None]:
    """Per decoder layer: the rotary variant its keys carry (a layer type such as "sliding_attention" for models with
    one rotary per layer type, "" for a single rotary, or a family's own names), or None for a layer without
    positions (NoPE layers: `config.no_rope_layers[i] == 0` in SmolLM3 and Llama 4). A family's `rotary_layers`
    (Cohere 2, EXAONE 4, Granite SWA) replaces this reading; it may start from `default_rotary_kinds`."""
    kinds = (rotary_layers or default_rotary_kinds)(model)
    if len(kinds) != model.config.num_hidden_layers:
        raise ValueError(f"{len(kinds)} rotary kinds for {model.config.num_hidden_layers} decoder layers")
    return list(kinds)


def default_rotary_kinds(model: torch.nn.Module) -> list[str | None]:
    """The rotary kinds read the default way: one per layer type where the rotary module takes a layer type, else
    one for every layer; None where `config.no_rope_layers` says a layer has no positions."""
    config = model.config
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    layers = config.num_hidden_layers
    if rotary is None:
        return [None] * layers
    # a rotary that takes a layer type, on a config that names them (5.12's PhiMoE takes one and has no layer_types)
    per_type = "layer_type" in inspect.signature(rotary.forward).parameters and getattr(config, "layer_types", None)
    kinds: list[str | None] = list(config.layer_types) if per_type else [""] * layers
    rotating = getattr(config, "no_rope_layers", None)
    if rotating is not None:
        kinds = [kind if uses else None for kind, uses in zip(kinds, rotating, strict=True)]
    return kinds


def rotary_shift(
    model: torch.nn.Module, kind: str | None, *, apply_name: str = "apply_rotary_pos_emb", **options
) -> RotaryShift | None:
    """The `RotaryShift` of the layers of rotary `kind` (see `layer_rotary_kinds`): the rotary module transformers'
    decoders keep at `model.base_model.rotary_emb`, with the rotation function `apply_name` of that module's own
    modeling file, called `(q, k, cos, sin)` or, where it rotates one tensor (Gemma 3n/4), `(x, cos, sin)`; None for
    layers without positions (their sink keys stay as written). `options` go to `RotaryShift`."""
    if kind is None:
        return None
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    if rotary is None:
        raise ValueError(
            f"{type(model).__name__} has no rotary embedding at `model.base_model.rotary_emb`; attention sinks "
            "need one to move the sink keys (or use num_sink_tokens=0)."
        )
    apply = getattr(sys.modules[type(rotary).__module__], apply_name, None)
    if apply is None:
        raise ValueError(f"{type(rotary).__module__} has no `{apply_name}` to move sink keys with.")
    if list(inspect.signature(apply).parameters)[1:2] == ["cos"]:  # rotates one tensor: (x, cos, sin)
        apply = partial(_one_tensor, apply)
    rope_type = rotary.rope_type[kind] if kind else rotary.rope_type
    cos_sin_at = partial(rotary, layer_type=kind) if kind else rotary
    return RotaryShift(cos_sin_at, apply, model.dtype, rope_type, **options)


def _one_tensor(apply, query, key, cos, sin):
    """A `(q, k, cos, sin)` rotation from a function that rotates one tensor (Gemma 3n/4's `apply_rotary_pos_emb`)."""
    return query, apply(key, cos, sin)


def model_request(model: torch.nn.Module, request: BoundedRequest) -> BoundedRequest:
    """`request` fitted to the model's attention types (validated against their windows and chunks), and checked by
    the model's family against what it cannot serve (its `check_request`: a configuration, or sinks where keys cannot
    move)."""
    fitted = request.for_windows(attention_windows(model.config))
    check = getattr(family_of(model), "check_request", None)
    if check is not None:
        check(model, fitted)
    return fitted


def fit(
    cache: BoundedCache,
    model: torch.nn.Module,
    request: BoundedRequest,
    rotary: RotaryFinder | None,
    rotary_layers: RotaryLayers | None = None,
) -> None:
    """Give `cache` the model's layers: one group per attention type, a `BoundedLayer` per attention layer (a
    `BoundedHybridLayer` for one that also has a recurrent state), transformers' own layer for the others; the sink
    keys of RoPE layers moved with `rotary` (None: the family has no rotary positions; sinks keep theirs)."""
    request = model_request(model, request)
    kinds = layer_kinds(model.config)
    rotary_kinds = layer_rotary_kinds(model, rotary_layers)
    rotaries: dict[str, RotaryShift] = {}
    if request.sinks and rotary is not None and uses_rope(model.config):
        apart = rotaries_apart(model)
        if apart is not None:
            require(f"`num_sink_tokens` on {type(model).__name__} ({apart})", "5.0.0")
        bounded = [rk for rk, kind in zip(rotary_kinds, kinds, strict=True) if kind.attention is not None]
        if all(rk is None for rk in bounded) and getattr(model.config, "no_rope_layers", None) is None:
            rotary(
                model, ""
            )  # no rotary module found: raise (a rotary model is not NoPE), never keep sinks as written
        rotaries = {rk: rotary(model, rk) for rk in dict.fromkeys(bounded) if rk is not None}
    groups = {name: LayerGroup(name, policy_for(request, name, size)) for name, size in request.windows}
    layers = []
    for kind, rotary_kind in zip(kinds, rotary_kinds, strict=True):
        if kind.attention is None:
            layers.append(own_layer(kind))
            continue
        group = groups[kind.attention]
        if isinstance(group.policy, ScoredPolicy):
            if kind.state is not None:
                raise ValueError(
                    f"cache_policy={request.policy.name!r} cannot serve {type(model).__name__}: its decoder layers hold "
                    "attention and a recurrent state in one cache layer, which the scored layer does not carry (use "
                    "the window: no cache_policy)."
                )
            check_scored_keys(model, request)
            layers.append(ScoredLayer(group))  # kept keys keep their positions: no sink is moved
            continue
        shift = rotaries.get(rotary_kind) if rotary_kind is not None else None
        if shift is not None:
            group.rotaries[rotary_kind] = shift
        if kind.state is None:
            layers.append(BoundedLayer(group, shift, rotary_kind or ""))
        else:
            layers.append(hybrid_layer_class()(group, shift, rotary_kind or "", **kind.state_kwargs))
    recurrent = tuple(dict.fromkeys(kind.state for kind in kinds if kind.state in RECURRENT))
    cache.fit(model, list(groups.values()), [layer for layer in layers if layer is not None], recurrent)


def check_scored_keys(model: torch.nn.Module, request: BoundedRequest) -> None:
    """KeyDiff scores the cached keys themselves: refuse a cache that holds something else (multi-head latent
    attention caches the compressed latent from 5.15.0 on; its keys are made from it per head at each step)."""
    mla = getattr(model.config, "kv_lora_rank", None) is not None
    if mla and not MLA_CACHES_LATENT:
        require(
            f"cache_policy={request.policy.name!r} on {type(model).__name__} (multi-head latent attention: before "
            "5.15.0 its cache holds per-head keys built from the latent, where the slow reference and cachelimit "
            "disagree on evictions, so it is not served)",
            "5.15.0",
        )
    latent = mla and MLA_CACHES_LATENT
    if latent and request.policy.name == "keydiff":
        raise ValueError(
            f"cache_policy='keydiff' cannot serve {type(model).__name__} on this transformers release: its cache holds "
            "the compressed latent of multi-head latent attention, not the keys attention reads, so KeyDiff's "
            "cosine would score something else. Use cache_policy='tova' or 'snapkv' (they score the attention)."
        )


def policy_for(request: BoundedRequest, kind: str, size: int | None) -> WindowPolicy | ScoredPolicy:
    """The policy of one attention type: a scored one (`request.policy`) for full attention; else the window, with
    what it keeps (`BoundedRequest.kept`) and the type's own pattern on top (a native sliding window, or chunks).
    A sliding or chunked layer keeps the window under a scored policy too: the model's own pattern hides every key
    older than its window from it, so there is nothing to choose among beyond the most recent."""
    if request.policy is not None and size is None:
        return ScoredPolicy(request.limit, request.sinks, request.protected, request.policy, request.window_prefill)
    chunk = size if kind == CHUNKED else None
    window = None if kind == CHUNKED else size
    return WindowPolicy(request.kept(kind, size), request.sinks, request.window_prefill, window, chunk)


def bounded_cache_for(
    model: torch.nn.Module,
    request: BoundedRequest,
    rotary: RotaryFinder | None,
    rotary_layers: RotaryLayers | None = None,
    static: bool = False,
) -> BoundedCache:
    """The cache a bounded run of `model` uses, fitted to it (raises a ValueError for what cannot be served);
    `static`: its rings are allocated at their full size (`BoundedCache`)."""
    cache = BoundedCache(
        request.limit, request.sinks, window_prefill=request.window_prefill, static=static, cache_policy=request.policy
    )
    fit(cache, model, request, rotary, rotary_layers)
    return cache


def rotary_finder(family) -> RotaryFinder | None:
    """How a family's RoPE sink keys are moved (its own finder, or `rotary_shift`); None for learned positions."""
    return (family.rotary or rotary_shift) if family.uses_rope else None


def check_family(model, family) -> None:
    """Refuse (ValueError, before any token) a family this transformers release cannot serve (`Family.since`)."""
    release = family.release_needed
    if release is not None:
        require(f"`cache_limit` on {type(model).__name__} ({family.since[0]})", release)


def cache_for_model(
    model,
    cache_limit: int,
    num_sink_tokens: int = 0,
    *,
    window_prefill: bool = False,
    static: bool = False,
    cache_policy=None,
) -> BoundedCache:
    """Installed on patched classes for `BoundedCache.from_model`: the cache a bounded `generate` of this model
    builds, validated as `generate` validates it."""
    family = family_of(model)
    check_family(model, family)
    request = BoundedRequest.from_arguments(
        cache_limit, num_sink_tokens, window_prefill=window_prefill, cache_policy=cache_policy
    )
    return bounded_cache_for(model, model_request(model, request), rotary_finder(family), family.rotary_layers, static)
