"""Nemotron: the family oracles; partial rotary, LayerNorm1P."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class NemotronFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "nemotron"
