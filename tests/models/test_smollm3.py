"""SmolLM3: the family oracles and transformers' own window (`use_sliding_window`)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class SmolLM3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "smollm3"
    native_window_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention",)}
