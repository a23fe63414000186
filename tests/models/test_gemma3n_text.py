"""Gemma 3n (text): sliding and full layers, AltUp and LAuReL blocks, and KV sharing (the later layers read the keys
and values of the last earlier layer of their type)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.hybrid_mixin import HybridOracleMixin, KVSharingOracleMixin


class Gemma3nTextFamilyTest(FamilyOracleMixin, HybridOracleMixin, KVSharingOracleMixin, unittest.TestCase):
    family = "gemma3n_text"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "num_kv_shared_layers": lambda layers: max(0, layers - 2),
        "activation_sparsity_pattern": lambda layers: [0.95] + [0.0] * (layers - 1),
        "hidden_size_per_layer_input": 8,
        "vocab_size_per_layer_input": 61,
        "laurel_rank": 4,
        "altup_num_inputs": 2,
    }
    notes = "KV sharing; AltUp, LAuReL, activation sparsity"
