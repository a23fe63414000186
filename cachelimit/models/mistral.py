"""Mistral: rotary position embeddings (and a native `sliding_window`, applied on top); sinks are re-rotated with the model's own rotary module."""

from __future__ import annotations

from transformers import MistralForCausalLM
from transformers.models.mistral.modeling_mistral import apply_rotary_pos_emb

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.rotary import RotaryShift

prepare_inputs_for_generation = make_prepare_inputs("mistral")

FAMILY = register_family(
    Family(
        name="mistral",
        model_classes=(MistralForCausalLM,),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        rotary=lambda model: RotaryShift(model.model.rotary_emb, apply_rotary_pos_emb, model.dtype),
    )
)
