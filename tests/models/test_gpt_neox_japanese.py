"""GPT-NeoX-Japanese (eager only): the family oracles; fused qkv, partial rotary."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class GptNeoxJapaneseFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "gpt_neox_japanese"
    tiny_config = {"intermediate_multiple_size": 2}
    attention = ("eager",)
    notes = "fused qkv projection"
