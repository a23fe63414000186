"""Llama: rotary position embeddings; sinks are re-rotated with the model's own rotary module."""

from __future__ import annotations

from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.rotary import RotaryShift

prepare_inputs_for_generation = make_prepare_inputs("llama")

FAMILY = register_family(
    Family(
        name="llama",
        model_classes=(LlamaForCausalLM,),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        rotary=lambda model: RotaryShift(model.model.rotary_emb, apply_rotary_pos_emb, model.dtype),
    )
)
