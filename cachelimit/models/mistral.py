"""Mistral: rotary position embeddings, sinks re-rotated with the model's own rotary module.

A native `sliding_window` needs nothing here: the generate wrapper keeps min(L, W - 1) positions and the
step plan applies W's mask on top.
"""

from __future__ import annotations

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.rotary import rotary_from

prepare_inputs_for_generation = make_prepare_inputs("mistral")

FAMILY = register_family(
    Family(
        name="mistral",
        class_names=("MistralForCausalLM",),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        rotary=rotary_from("transformers.models.mistral.modeling_mistral"),
    )
)
