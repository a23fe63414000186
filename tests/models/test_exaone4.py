"""EXAONE 4: sliding layers with RoPE, full-attention layers without positions (with a sliding window)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Exaone4FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "exaone4"
    tiny_config = {"layer_types": ("sliding_attention", "full_attention")}
    notes = "with a sliding window, full layers are NoPE; q/k norms"
    native_window_switches = {"layer_types": ("sliding_attention",)}
