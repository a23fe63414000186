"""Llama: rotary position embeddings; sinks are re-rotated with the model's own rotary module."""

from __future__ import annotations

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.rotary import rotary_from

prepare_inputs_for_generation = make_prepare_inputs("llama")

FAMILY = register_family(
    Family(
        name="llama",
        class_names=("LlamaForCausalLM",),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        rotary=rotary_from("transformers.models.llama.modeling_llama"),
    )
)
