"""Phi (1, 1.5, 2): partial rotary, applied by the attention to the first `rotary_ndims` dims of each head."""

from ..family import rope_family

FAMILY = rope_family("phi", "PhiForCausalLM")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
