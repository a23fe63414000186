"""Qwen3-MoE: Qwen3's attention (q/k norms, RoPE) with a mixture-of-experts MLP."""

from ..family import rope_family

FAMILY = rope_family(
    "qwen3_moe",
    "Qwen3MoeForCausalLM",
    notes="mixture of experts, q/k norms",
    tiny_config={"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
