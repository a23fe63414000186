"""HyperCLOVA X: the family oracles (a Llama with muP-style multipliers)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class HyperclovaxFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "hyperclovax"
