"""Nemotron-H: Mamba 2 layers, attention layers without positions, and MLP-only layers."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class NemotronHFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "nemotron_h"
    tiny_config = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "layers_block_type": ("linear_attention", "full_attention", "mlp"),
        "ssm_state_size": 8,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "n_groups": 1,
        "chunk_size": 8,
        "pad_token_id": 0,
    }
    notes = "Mamba 2 and MLP-only layers; attention without positions"
