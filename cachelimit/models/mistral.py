"""Mistral: RoPE, and a native `sliding_window` on every layer (the smaller window wins: the generate
wrapper keeps min(L, W - 1) positions and the step plan applies W's mask on top)."""

from ..family import rope_family

FAMILY = rope_family("mistral", "MistralForCausalLM", tiny_config={"sliding_window": None})
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
