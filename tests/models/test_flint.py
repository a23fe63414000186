"""Flint: sliding layers with RoPE, full layers without positions; mixture of experts with a shared expert."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class FlintFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "flint"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16,
        "initializer_range": 0.1,
    }
    attention = ("eager",)
    notes = "full layers are NoPE; learned sink logits (`s_aux`, kept as they are); mixture of experts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
