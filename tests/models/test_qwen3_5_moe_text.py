"""Qwen 3.5 MoE (text): gated delta net layers between full-attention layers, mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_qwen3_5_text import LINEAR
from tests.recurrent_mixin import RecurrentOracleMixin

MOE = {"moe_intermediate_size": 16, "shared_expert_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}


class Qwen35MoeTextFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "qwen3_5_moe_text"
    tiny_config = {**LINEAR, **MOE}
    notes = "linear-attention layers; mixture of experts"
