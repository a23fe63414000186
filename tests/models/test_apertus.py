"""Apertus: the family oracles; q/k norms before the rotation, xIELU MLP."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class ApertusFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "apertus"
    notes = "q/k norms before the rotation"
