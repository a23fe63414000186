"""Cohere (Command-R): RoPE with interleaved rotary pairs, parallel attention and MLP."""

from ..family import rope_family

FAMILY = rope_family("cohere", "CohereForCausalLM", notes="interleaved rotary pairs")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
