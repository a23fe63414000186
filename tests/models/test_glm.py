"""GLM: the family oracles; interleaved, partial rotary."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class GlmFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "glm"
    notes = "interleaved rotary pairs"
