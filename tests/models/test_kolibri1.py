"""Kolibri 1: with a sliding window, only the sliding layers rotate (full layers are NoPE); mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Kolibri1FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "kolibri1"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16,
        "initializer_range": 0.1,
    }
    notes = "with a sliding window, full layers are NoPE; mixture of experts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
