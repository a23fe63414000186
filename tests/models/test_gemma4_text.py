"""Gemma 4 (text): sliding and full layers, proportional partial RoPE on the full layers (their own head dimension),
and KV sharing: the later layers read the keys and values of the last earlier layer of their type."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.hybrid_mixin import HybridOracleMixin, KVSharingOracleMixin


class Gemma4TextFamilyTest(FamilyOracleMixin, HybridOracleMixin, KVSharingOracleMixin, unittest.TestCase):
    family = "gemma4_text"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "global_head_dim": 16,  # full layers have their own, larger head dimension (512 against 256)
        "num_kv_shared_layers": lambda layers: max(0, layers - 2),  # every layer after one of each type
        "hidden_size_per_layer_input": 8,
        "vocab_size_per_layer_input": 61,
    }
    notes = "KV sharing; proportional RoPE (a quarter of the dims) on full layers, with their own head size"
