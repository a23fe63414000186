"""DeepSeek V3: multi-head latent attention with interleaved rotary pairs, grouped mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_deepseek_v2 import MLA


class DeepseekV3FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "deepseek_v3"
    tiny_config = {**MLA, "q_lora_rank": 12, "n_group": 2, "topk_group": 1}
    notes = "MLA: sinks rotate only the rotary part; interleaved rotary pairs"
