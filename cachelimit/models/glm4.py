"""GLM-4: partial rotary with interleaved pairs, extra post-attention and post-MLP norms."""

from ..family import rope_family

FAMILY = rope_family("glm4", "Glm4ForCausalLM", notes="interleaved rotary pairs")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
