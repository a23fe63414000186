"""Gemma: RoPE (embeddings scaled by sqrt(hidden_size) inside the model)."""

from ..family import rope_family

FAMILY = rope_family("gemma", "GemmaForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
