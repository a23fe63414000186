"""Ministral: RoPE, every layer with a native sliding window (`layer_types`)."""

from ..family import rope_family

FAMILY = rope_family("ministral", "MinistralForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
