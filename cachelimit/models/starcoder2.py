"""Starcoder2: RoPE and an optional native `sliding_window` on every layer."""

from ..family import rope_family

FAMILY = rope_family("starcoder2", "Starcoder2ForCausalLM", tiny_config={"sliding_window": None})
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
