"""Arcee (AFM): the family oracles; a Llama with a ReLU^2 MLP."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class ArceeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "arcee"
