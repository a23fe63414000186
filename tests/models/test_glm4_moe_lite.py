"""GLM-4 MoE Lite: multi-head latent attention as DeepSeek V3's (the compressed latent and the shared rotary key cached)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_deepseek_v2 import MLA


class Glm4MoeLiteFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "glm4_moe_lite"
    tiny_config = {**MLA, "q_lora_rank": 12, "n_group": 1, "topk_group": 1}
    notes = "MLA: sinks rotate only the rotary part"
