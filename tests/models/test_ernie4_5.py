"""ERNIE 4.5: the family oracles; interleaved rotary pairs."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Ernie45FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "ernie4_5"
    notes = "interleaved rotary pairs"
