"""Which attention each decoder layer uses (full or sliding window), read from the model's config.

transformers declares per-layer attention in `config.layer_types` (Gemma 2/3, Qwen2/3, Cohere2, ...); older configs
only have a `sliding_window` that applies to every layer (Mistral, Mixtral, Phi-3, Starcoder2). Each attention type
becomes one group of bounded layers (`core.cache.LayerGroup`), with its own window and its own mask.
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


def attention_windows(config) -> dict[str, int | None]:
    """Attention type -> its native window (keys a query sees, itself included; None: full attention), for the types
    the model's layers use, in the order of their first layer. Raises a ValueError for what cannot be served."""
    kinds = list(dict.fromkeys(attention_kinds(config)))
    unknown = [kind for kind in kinds if kind not in (FULL, SLIDING)]
    if unknown:
        raise ValueError(f"`cache_limit` supports layers of types {FULL!r} and {SLIDING!r}; this model has {unknown}.")
    window = getattr(config, "sliding_window", None)
    if SLIDING in kinds and (not isinstance(window, int) or window < 1):
        raise ValueError(f"config.layer_types asks for sliding attention but config.sliding_window={window!r}.")
    return {kind: window if kind == SLIDING else None for kind in kinds}


def native_window(config) -> int | None:
    """The model's own sliding window when EVERY layer has it; None when some layer attends to everything (no layer
    slides, or a hybrid model: its full layers keep the limit)."""
    windows = attention_windows(config)
    return windows[SLIDING] if set(windows) == {SLIDING} else None
