"""Which attention each decoder layer uses (full or sliding window), read from the model's config.

transformers declares per-layer attention in `config.layer_types` (Gemma 2/3, Qwen2/3, Cohere2, ...);
older configs only have a `sliding_window` that applies to every layer (Mistral, Mixtral, Phi-3, Starcoder2).
A bounded cache serves one mask per step, so today every layer must share one attention type; a config
mixing them ("hybrid") is refused here, before any token, instead of being run with one layer type's mask.
"""

from __future__ import annotations

FULL, SLIDING = "full_attention", "sliding_attention"


def attention_kinds(config) -> list[str]:
    """The attention type of every decoder layer."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return list(layer_types)
    window = getattr(config, "sliding_window", None)
    sliding = isinstance(window, int) and window > 0
    return [SLIDING if sliding else FULL] * config.num_hidden_layers


def native_window(config) -> int | None:
    """The model's own sliding window (keys a query sees, itself included) when every layer has it; None when
    no layer has one. Raises a ValueError for a model whose layers mix attention types (not served yet)."""
    kinds = attention_kinds(config)
    unknown = sorted(set(kinds) - {FULL, SLIDING})
    if unknown:
        raise ValueError(
            f"`cache_limit` supports layers of types {FULL!r} and {SLIDING!r}; this model has {unknown} "
            "(config.layer_types)."
        )
    if len(set(kinds)) > 1:
        counts = ", ".join(f"{kinds.count(kind)} {kind}" for kind in (FULL, SLIDING))
        raise ValueError(
            f"`cache_limit` does not support yet a model whose layers mix attention types (config.layer_types: "
            f"{counts}): each type needs its own mask and kept window. Use a config whose layers share one type."
        )
    if kinds[0] == FULL:
        return None
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"config.layer_types asks for sliding attention but config.sliding_window={window!r}.")
    return window
