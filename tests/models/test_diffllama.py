"""DiffLlama: the family oracles; differential attention (two softmaxes over the same keys)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class DiffllamaFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "diffllama"
    notes = "differential attention"
