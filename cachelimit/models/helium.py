"""Helium: Llama-like RoPE decoder."""

from ..family import rope_family

FAMILY = rope_family("helium", "HeliumForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
