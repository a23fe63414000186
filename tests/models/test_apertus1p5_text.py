"""Apertus 1.5's text model: the family oracles; q/k norms before the rotation."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Apertus1p5TextFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "apertus1p5_text"
    notes = "q/k norms before the rotation"
