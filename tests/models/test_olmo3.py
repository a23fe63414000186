"""OLMo 3: sliding and full layers, one rotary per layer type."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Olmo3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "olmo3"
    tiny_config = {"layer_types": ("sliding_attention", "full_attention")}
    notes = "one rotary per layer type"
    native_window_switches = {"layer_types": ("sliding_attention",)}
