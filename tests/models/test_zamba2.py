"""Zamba 2: Mamba 2 layers, some of which also run a shared attention block (hybrid layers)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class Zamba2FamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "zamba2"
    tiny_config = {
        "layers_block_type": ("hybrid", "linear_attention"),
        "num_key_value_heads": 4,
        "mamba_d_state": 8,
        "n_mamba_heads": 2,
        "mamba_headdim": 32,
        "chunk_size": 8,
        "use_mem_rope": True,
        "initializer_range": 0.1,  # its shared attention block sits behind adapters: larger random weights let it show
    }
    notes = "hybrid layers: a bounded attention block and a Mamba 2 state in one layer"
