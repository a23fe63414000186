"""SmolLM3: RoPE, except every `no_rope_layer_interval`-th layer, which has no positions (NoPE)."""

from ..family import rope_family

FAMILY = rope_family(
    "smollm3",
    "SmolLM3ForCausalLM",
    notes="NoPE layers keep their sinks as written",
    tiny_config={"no_rope_layer_interval": 2},
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
