"""Granite 4.0 hybrid: Mamba 2 layers with attention layers among them, mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class GraniteMoeHybridFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "granitemoehybrid"
    tiny_config = {
        "layer_types": ("linear_attention", "full_attention"),
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "shared_intermediate_size": 16,
        "mamba_n_heads": 4,
        "mamba_d_head": 16,
        "mamba_d_state": 8,
        "mamba_chunk_size": 8,
        "position_embedding_type": "rope",
    }
    notes = "Mamba 2 layers; mixture of experts"
