"""Qwen2: RoPE; `use_sliding_window` gives the layers from `max_window_layers` on a native window."""

from ..family import rope_family

FAMILY = rope_family("qwen2", "Qwen2ForCausalLM", notes="`max_window_layers` below the depth: hybrid")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
