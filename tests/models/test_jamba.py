"""Jamba: Mamba layers with attention layers among them (one in two here, one in eight in the real checkpoints)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class JambaFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "jamba"
    tiny_config = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "num_experts": 2,
        "num_experts_per_tok": 1,
        "mamba_d_state": 4,
        "mamba_dt_rank": 4,
        "pad_token_id": 0,
    }
    notes = "Mamba layers (their state is transformers' own); attention without positions"
