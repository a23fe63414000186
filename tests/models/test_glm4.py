"""glm4: the family oracles (banded reference, attention-sink reference, cache bound)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Glm4FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "glm4"
    notes = "interleaved rotary pairs"
