"""Llama: rotary position embeddings; sinks are re-rotated with the model's own rotary module."""

from __future__ import annotations

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.rotary import RotaryShift


def rotary_shift(model) -> RotaryShift:
    """Sink re-rotation with this model's own rotary module and RoPE function."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return RotaryShift(model.model.rotary_emb, apply_rotary_pos_emb, model.dtype)


prepare_inputs_for_generation = make_prepare_inputs("llama")

FAMILY = register_family(
    Family(
        name="llama",
        class_names=("LlamaForCausalLM",),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        rotary=rotary_shift,
    )
)
