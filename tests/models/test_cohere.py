"""cohere: the family oracles (banded reference, attention-sink reference, cache bound)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class CohereFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "cohere"
    notes = "interleaved rotary pairs"
