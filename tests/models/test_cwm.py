"""CWM: the family oracles, transformers' own window and its layer mix (one full layer in four)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class CwmFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "cwm"
    tiny_config = {"layer_types": ("full_attention", "sliding_attention", "sliding_attention", "sliding_attention")}
    native_window_switches = {"layer_types": ("sliding_attention",)}
