"""BitNet: the family oracles (ternary-weight linear layers, sub-norm in attention)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class BitnetFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "bitnet"
