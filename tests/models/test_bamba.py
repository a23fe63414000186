"""Bamba: Mamba 2 layers with a few attention layers (partial RoPE) among them."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class BambaFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "bamba"
    tiny_config = {
        "attn_layer_indices": lambda layers: list(range(1, layers, 2)),
        "mamba_n_heads": 4,
        "mamba_d_head": 16,
        "mamba_d_state": 8,
        "mamba_chunk_size": 8,
    }
    notes = "Mamba 2 layers; partial rotary"
