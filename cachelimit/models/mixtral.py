"""Mixtral: Mistral's attention (RoPE, optional native `sliding_window`) with a mixture-of-experts MLP."""

from ..family import rope_family

FAMILY = rope_family(
    "mixtral",
    "MixtralForCausalLM",
    notes="mixture of experts",
    tiny_config={"sliding_window": None, "num_local_experts": 4, "num_experts_per_tok": 2},
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
