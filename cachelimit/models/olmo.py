"""OLMo: Llama-like RoPE decoder with non-parametric layer norms."""

from ..family import rope_family

FAMILY = rope_family("olmo", "OlmoForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
