"""Youtu: multi-head latent attention as DeepSeek V3's (the compressed latent and the shared rotary key cached)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.models.test_deepseek_v2 import MLA


class YoutuFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "youtu"
    tiny_config = {
        key: MLA[key]
        for key in (
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "head_dim",
            "v_head_dim",
            "num_key_value_heads",
        )
    } | {"q_lora_rank": 12}
    notes = "MLA: sinks rotate only the rotary part"
