"""Llama: rotary position embeddings; sinks are re-rotated with the model's own rotary module."""

from ..family import rope_family

FAMILY = rope_family("llama", "LlamaForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
