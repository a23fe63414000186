"""DeepSeek V2: multi-head latent attention (keys `[nope | rope]`, values of their own size), mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin

#: the latent attention alone (MiniCPM 3, Youtu: no experts)
MLA_ATTENTION = {
    "kv_lora_rank": 8,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "head_dim": 4,  # the rotary size
    "v_head_dim": 6,
    "num_key_value_heads": 4,
}
#: with DeepSeek's experts and a dense first layer
MLA = {
    **MLA_ATTENTION,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "moe_intermediate_size": 16,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
}


class DeepseekV2FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "deepseek_v2"
    tiny_config = {**MLA, "q_lora_rank": None}
    notes = "MLA: sinks rotate only the rotary part (the cached rotary key, or the end of each key)"
