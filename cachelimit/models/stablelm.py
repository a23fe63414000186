"""StableLM: partial rotary (only the first `partial_rotary_factor` of each head's dims rotate)."""

from ..family import rope_family

FAMILY = rope_family("stablelm", "StableLmForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
