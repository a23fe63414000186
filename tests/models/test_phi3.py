"""Phi-3: the family oracles and transformers' own `sliding_window`."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class Phi3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "phi3"
    notes = "fused qkv projection"
