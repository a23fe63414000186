"""olmo: the family oracles (banded reference, attention-sink reference, cache bound)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class OlmoFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "olmo"
