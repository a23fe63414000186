"""Persimmon: the family oracles; fused qkv, q/k layer norms, partial rotary."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class PersimmonFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "persimmon"
    notes = "fused qkv projection, q/k layer norms"
