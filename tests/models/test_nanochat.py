"""nanochat: the family oracles; weightless q/k norms after the rotation (which commute with it)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class NanochatFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "nanochat"
    notes = "q/k norms (no weights) after the rotation"
