"""Granite MoE SWA: Granite SWA's attention (learned sink logits, one RoPE base per layer) with experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin
from tests.models.test_granite_swa import layer_bases


class GranitemoeSwaFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "granitemoe_swa"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "layer_rope_theta": layer_bases,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "initializer_range": 0.1,
    }
    attention = ("eager",)
    notes = "learned sink logits (`s_aux`, kept as they are); one RoPE base per layer, 0 for NoPE; mixture of experts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
