"""Qwen2: the family oracles, and transformers' own window (`use_sliding_window` on every layer)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Qwen2FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "qwen2"
    notes = "`max_window_layers` below the depth: hybrid"
    native_window_switches = {"use_sliding_window": True, "max_window_layers": 0}
    hybrid_switches = {"use_sliding_window": True, "max_window_layers": 1}
