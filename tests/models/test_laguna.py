"""Laguna: the family oracles, its own window and a sliding/full mix; one rotary base (and rotary share) per layer type."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class LagunaFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "laguna"
    tiny_config = {
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16,
    }
    notes = "mixture of experts; per-layer head counts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
