"""OLMo 2: RoPE with RMS norms on the whole query and key projections (before the rotation)."""

from ..family import rope_family

FAMILY = rope_family("olmo2", "Olmo2ForCausalLM", notes="q/k norms before the rotation")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
