"""Gemma 3 (text): RoPE with one rotary base per layer type (local for sliding layers, global for full ones),
q/k norms, and five sliding layers per full one (`layer_types`)."""

from ..family import rope_family

FAMILY = rope_family(
    "gemma3_text",
    "Gemma3ForCausalLM",
    notes="q/k norms",
    tiny_config={"layer_types": ("sliding_attention", "full_attention"), "query_pre_attn_scalar": 8},
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
