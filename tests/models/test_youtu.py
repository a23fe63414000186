"""Youtu: multi-head latent attention as DeepSeek V3's (the compressed latent and the shared rotary key cached)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_deepseek_v2 import MLA_ATTENTION


class YoutuFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "youtu"
    tiny_config = {**MLA_ATTENTION, "q_lora_rank": 12}
    notes = "MLA: sinks rotate only the rotary part"
