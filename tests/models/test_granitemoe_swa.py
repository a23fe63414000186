"""Granite MoE SWA: Granite SWA's attention (learned sink logits, one RoPE base per layer) with experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin
from tests.models.test_granite_swa import SWA_ATTENTION


class GranitemoeSwaFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "granitemoe_swa"
    tiny_config = {**SWA_ATTENTION, "num_local_experts": 4, "num_experts_per_tok": 2}
    attention = ("eager",)
    notes = "learned sink logits (`s_aux`, kept as they are); one RoPE base per layer, 0 for NoPE; mixture of experts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
