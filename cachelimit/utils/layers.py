"""Which attention each decoder layer uses (full or sliding window), read from the model's config.

transformers declares per-layer attention in `config.layer_types` (Gemma 2/3, Qwen2/3, Cohere2, ...); older
configs only have a `sliding_window` that applies to every layer (Mistral, Mixtral, Phi-3, Starcoder2). A model
whose layers mix the two ("hybrid") gets one cache group per layer type (`cachelimit.layered_cache`).
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
    """The model's own sliding window (keys a query sees, itself included) when EVERY layer has it; None when
    some layer attends to everything (no layer slides, or a hybrid model: its full layers keep the limit)."""
    if set(attention_kinds(config)) != {SLIDING}:
        return None
    window = getattr(config, "sliding_window", None)
    return window if isinstance(window, int) and window > 0 else None
