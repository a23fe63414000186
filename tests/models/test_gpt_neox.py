"""gpt_neox: the family oracles (banded reference, attention-sink reference, cache bound)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class GptNeoxFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "gpt_neox"
    notes = "fused qkv projection"
