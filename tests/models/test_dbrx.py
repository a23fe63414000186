"""DBRX: the family oracles, on a tiny mixture of experts with its fused qkv projection and its clipping of the
projected queries, keys and values (`clip_qkv`, on as in the checkpoints)."""

from __future__ import annotations

import unittest

from transformers.models.dbrx.configuration_dbrx import DbrxFFNConfig

from cachelimit.hf import compat
from tests.family_mixin import FamilyOracleMixin

# ffn_hidden_size = d_model: 5.12's router reads its input width from ffn_hidden_size; and where the FFN config has a
# hidden_size of its own (5.x), it is d_model too (5.12 does not mirror it, 4.x has no such field)
FFN = {"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2}
FFN |= {"hidden_size": 32} if "hidden_size" in compat.config_fields(DbrxFFNConfig) else {}


class DbrxFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "dbrx"
    tiny_config = {
        "d_model": 32,
        "n_heads": 4,
        "max_seq_len": 1024,
        "attn_config": {"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},  # 5.x attention reads it
        "ffn_config": FFN,
        "pad_token_id": 0,
    }
    notes = "mixture of experts; fused qkv projection, clipped"
