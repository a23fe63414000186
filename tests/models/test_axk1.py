"""A.X K1: multi-head latent attention as DeepSeek V3's (the compressed latent and the shared rotary key cached)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_deepseek_v2 import MLA


class Axk1FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "axk1"
    tiny_config = {**MLA, "q_lora_rank": 12, "n_group": 2, "topk_group": 1}
    notes = "MLA: sinks rotate only the rotary part"
