"""Qwen3: RoPE with per-head RMS norms on queries and keys (applied before the rotation)."""

from ..family import rope_family

FAMILY = rope_family("qwen3", "Qwen3ForCausalLM", notes="q/k norms before the rotation")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
