"""AFMoE (Arcee): sliding ("local") layers with RoPE, full layers without positions; a dense first layer, then MoE."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class AfmoeFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "afmoe"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": 16,
        "num_dense_layers": 1,
        "initializer_range": 0.1,  # larger random weights: attention far from uniform, so where sinks sit shows
    }
    notes = "full layers are NoPE (their sinks keep their keys as written); gated attention; mixture of experts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
