"""Qwen3 (q/k norms before the rotation): the family oracles and transformers' own window."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Qwen3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "qwen3"
    notes = "q/k norms before the rotation"
    native_window_switches = {"use_sliding_window": True, "max_window_layers": 0}
    hybrid_switches = {"use_sliding_window": True, "max_window_layers": 1}
