"""Gemma 2: RoPE, attention logit soft-capping, alternating sliding and full attention layers (`layer_types`)."""

from ..family import rope_family

FAMILY = rope_family(
    "gemma2",
    "Gemma2ForCausalLM",
    notes="attention soft-capping",
    tiny_config={"layer_types": ("sliding_attention", "full_attention"), "query_pre_attn_scalar": 8},
    attention=("eager",),
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
