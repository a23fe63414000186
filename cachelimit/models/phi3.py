"""Phi-3: RoPE (fused qkv projection) and an optional native `sliding_window` on every layer."""

from ..family import rope_family

FAMILY = rope_family("phi3", "Phi3ForCausalLM", notes="fused qkv projection")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
