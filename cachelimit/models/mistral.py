"""Mistral: rotary position embeddings (and a native `sliding_window`, applied on top); sinks are re-rotated with the model's own rotary module."""

from __future__ import annotations

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.rotary import RotaryShift


def rotary_shift(model) -> RotaryShift:
    """Sink re-rotation with this model's own rotary module and RoPE function."""
    from transformers.models.mistral.modeling_mistral import apply_rotary_pos_emb

    return RotaryShift(model.model.rotary_emb, apply_rotary_pos_emb, model.dtype)


prepare_inputs_for_generation = make_prepare_inputs("mistral")

FAMILY = register_family(
    Family(
        name="mistral",
        class_names=("MistralForCausalLM",),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        rotary=rotary_shift,
    )
)
