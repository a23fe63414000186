"""What each decoder layer caches, read from the model's config: which layers the bound keeps, and what it leaves alone.

transformers names a cache layer type per decoder layer (`config.layer_types`, or its own reading of the config:
`compat.cache_layer_types`). Three kinds of attention are bounded, each type one group of bounded layers
(`core.cache.LayerGroup`) with its own policy and its own mask:
- `full_attention`: keeps the limit `L`;
- `sliding_attention` (a native window `W`, keys a query sees, itself included): keeps `min(L, W - 1)`, the window
  applying on top (Gemma 2/3/4, GPT-OSS, Cohere 2, OLMo 3, ...);
- `chunked_attention` (chunks of `C` positions, Llama 4): keeps `min(L, S + C - 1)`: a query never reads past its own
  chunk, so the chunk applies on top and the sinks (visible from the first chunk only) need no part of it.
Everything else is transformers' own cache layer, untouched by the bound: the recurrent state of a linear-attention,
SSM or short-convolution layer (`linear_attention`, `conv`: Qwen 3.5, Qwen3-Next, Jamba, Bamba, LFM2, ...), and
nothing at all for a layer that reads another layer's keys and values (`dummy`: Gemma 3n and Gemma 4's KV sharing,
which then reads the bounded cache of the layer it shares with, under that layer's plan and mask). A `hybrid` layer
(Zamba 2, Falcon-H1) has both: a bounded attention part and its own recurrent state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .compat import cache_layer_types, placeholder_types

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
BOUNDED = (FULL, SLIDING, CHUNKED)
#: transformers' cache layer types of recurrent states, which the bound leaves as they are
RECURRENT = ("linear_attention", "conv")
#: cache layer types with an attention part (of this type) and a recurrent state
HYBRID = {"hybrid": FULL, "hybrid_sliding": SLIDING}
#: the cache layer type of a layer that keeps nothing (it reads another layer's keys and values, or has no attention)
NOTHING = "dummy"
#: the config field that sizes an attention type's own pattern
SIZE_FIELD = {SLIDING: "sliding_window", CHUNKED: "attention_chunk_size"}


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer caches: `attention`, the attention type the bound keeps (its group; None: no keys and
    values of its own), and `state`, the transformers cache layer type of what the bound leaves alone (a recurrent
    state, `NOTHING`; None: nothing), with `state_kwargs` for its layer class."""

    attention: str | None
    state: str | None = None
    state_kwargs: dict = field(default_factory=dict)


def layer_kinds(config) -> list[LayerKind]:
    """What every decoder layer caches; a ValueError for a layer type the bound cannot serve."""
    kinds = []
    for layer_type, kwargs in zip(*cache_layer_types(config), strict=True):
        if layer_type in BOUNDED:
            kinds.append(LayerKind(layer_type))
        elif layer_type in HYBRID:
            kinds.append(LayerKind(HYBRID[layer_type], "linear_attention", kwargs))
        elif layer_type in RECURRENT or layer_type == NOTHING or layer_type in placeholder_types():
            kinds.append(LayerKind(None, layer_type, kwargs))
        else:
            served = ", ".join(repr(kind) for kind in (*BOUNDED, *RECURRENT, *HYBRID, NOTHING))
            raise ValueError(
                f"`cache_limit` serves cache layer types {served}; layer {len(kinds)} of this model is "
                f"{layer_type!r}, whose cache the bound cannot keep exactly."
            )
    return kinds


def attention_kinds(config) -> list[str | None]:
    """The bounded attention type of every decoder layer (None: it keeps no keys and values of its own)."""
    return [kind.attention for kind in layer_kinds(config)]


def attention_windows(config) -> dict[str, int | None]:
    """Bounded attention type -> its native size (the sliding window W, keys a query sees, itself included; the
    chunk size C of chunked attention; None: full attention), for the types the model's layers use, in the order of
    their first layer. Raises a ValueError for what cannot be served."""
    bidirectional = getattr(config, "use_bidirectional_attention", None)
    if bidirectional is True or bidirectional == "all":  # Gemma 3/4 embedding checkpoints: keys see later tokens
        raise ValueError(
            f"`cache_limit` bounds causal attention; config.use_bidirectional_attention={bidirectional!r} makes every "
            "token read the tokens after it, which a cache of past keys cannot serve."
        )
    kinds = [kind for kind in dict.fromkeys(attention_kinds(config)) if kind is not None]
    if not kinds:
        raise ValueError("`cache_limit` bounds attention layers, and this model has none (only recurrent layers).")
    sizes = {}
    for kind in kinds:
        name = SIZE_FIELD.get(kind)
        size = None if name is None else getattr(config, name, None)
        if name is not None and (not isinstance(size, int) or size < 1):
            raise ValueError(f"config.layer_types asks for {kind} but config.{name}={size!r}.")
        sizes[kind] = size
    return sizes
