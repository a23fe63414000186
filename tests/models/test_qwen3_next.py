"""Qwen3-Next: gated delta net layers between full-attention layers, mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_qwen3_5_moe_text import MOE
from tests.models.test_qwen3_5_text import LINEAR
from tests.recurrent_mixin import RecurrentOracleMixin


class Qwen3NextFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "qwen3_next"
    tiny_config = {**LINEAR, **MOE}
    notes = "linear-attention layers; mixture of experts"
