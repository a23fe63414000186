"""olmo2: the family oracles (banded reference, attention-sink reference, cache bound)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Olmo2FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "olmo2"
    notes = "q/k norms before the rotation"
