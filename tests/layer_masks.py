"""The references' view of a model's layers (read from its config, independently of cachelimit): the attention type of
every decoder layer, what each type sees natively, and the masks a model takes for one forward of the references.

A model with one attention type and nothing else takes one 4D mask. A hybrid takes a dict: one 4D mask per attention
type, and for its recurrent layers (linear attention, SSM, short convolutions) the 2D padding mask of the forward's
tokens (None where nothing is padded), as transformers' own `generate` gives them.
"""

from __future__ import annotations

import torch

from cachelimit.hf.masks import transformers_mask as attention_mask_for

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
#: config layer types -> (attention type the layer reads with, or None; the mask key of its recurrent part, or None)
LAYER_TYPES = {
    FULL: (FULL, None),
    SLIDING: (SLIDING, None),
    CHUNKED: (CHUNKED, None),
    "linear_attention": (None, "linear_attention"),
    "conv": (None, "conv"),
    "hybrid": (FULL, "linear_attention"),
    "hybrid_sliding": (SLIDING, "linear_attention"),
    "mlp": (None, None),
    "moe": (None, None),
}


def config_layer_types(config) -> list[str]:
    """Every decoder layer's type as its config declares it (one sliding window for all, or none, without a list)."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return list(layer_types)
    window = getattr(config, "sliding_window", None)
    return [SLIDING if isinstance(window, int) and window > 0 else FULL] * config.num_hidden_layers


def attention_types(config) -> list[str]:
    """The attention types the model's layers read with, in the order of their first layer."""
    return list(dict.fromkeys(LAYER_TYPES[kind][0] for kind in config_layer_types(config) if LAYER_TYPES[kind][0]))


def recurrent_keys(config) -> list[str]:
    """The mask keys of the model's recurrent layers."""
    return list(dict.fromkeys(LAYER_TYPES[kind][1] for kind in config_layer_types(config) if LAYER_TYPES[kind][1]))


def native_size(config, kind: str) -> int | None:
    """An attention type's own pattern: the sliding window W (keys a query sees, itself included), the chunk C."""
    if kind == SLIDING:
        return config.sliding_window
    if kind == CHUNKED:
        return config.attention_chunk_size
    return None


def takes_one_mask(config) -> bool:
    return len(attention_types(config)) == 1 and not recurrent_keys(config)


def model_masks(model, visibility: dict[str, torch.Tensor], padding: torch.Tensor | None):
    """What to pass as `attention_mask` for one forward: `visibility` per attention type ([B, queries, keys] booleans)
    and `padding`, the forward's 2D mask of its own tokens, for the recurrent layers."""
    config = model.config
    masks = {kind: attention_mask_for(config, seen, model.dtype) for kind, seen in visibility.items()}
    if takes_one_mask(config):
        (mask,) = masks.values()
        return mask
    recurrent = None if padding is None or bool(padding.all()) else padding
    return {**masks, **dict.fromkeys(recurrent_keys(config), recurrent)}


def chunk_of(columns: torch.Tensor, attention_mask: torch.Tensor, chunk: int) -> torch.Tensor:
    """[B, T] the chunk of each column: chunks of `chunk` positions counted from each row's first real token (as
    transformers' chunked masks discount left padding)."""
    first_real = attention_mask.long().argmax(-1)
    return torch.div(columns[None, :] - first_real[:, None], chunk, rounding_mode="floor")


def kept_limit(config, kind: str, limit: int, num_sinks: int) -> int:
    """Positions one attention type keeps (docs/semantics.md): the limit; min(L, W - 1) under a sliding window W;
    min(L, S + C - 1) under chunks of C (a query reads at most C - 1 keys of its own chunk; the sinks, visible from
    the first chunk only, take none of them)."""
    size = native_size(config, kind)
    if kind == SLIDING:
        return min(limit, size - 1)
    if kind == CHUNKED:
        return min(limit, num_sinks + size - 1)
    return limit
