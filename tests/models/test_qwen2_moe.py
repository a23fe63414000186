"""Qwen2-MoE: the family oracles, transformers' own window and the hybrid layer mix (`use_sliding_window`)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Qwen2MoeFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "qwen2_moe"
    tiny_config = {
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 32,
    }
    notes = "mixture of experts with a shared expert"
    native_window_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention",)}
    hybrid_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention", "full_attention")}
