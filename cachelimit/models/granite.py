"""Granite: Llama's layout with embedding, residual, attention and logit multipliers."""

from ..family import rope_family

FAMILY = rope_family("granite", "GraniteForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
