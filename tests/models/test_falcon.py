"""Falcon: the family oracles on its rotary configuration (multi-query attention, parallel attention and MLP, as
the 7B checkpoint); ALiBi (`alibi=True`, Falcon-RW) is refused before any token."""

from __future__ import annotations

import unittest

from tests.common import build_tiny_model, left_padded_batch
from tests.family_mixin import FamilyOracleMixin


class FalconFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "falcon"
    tiny_config = {
        "hidden_size": 32,
        "num_attention_heads": 4,
        "multi_query": True,
        "parallel_attn": True,
        "max_position_embeddings": 1024,
        "pad_token_id": 0,
    }
    notes = "multi-query attention; `alibi=True` refused (ALiBi)"

    def test_alibi_is_refused_before_any_token(self):
        model = build_tiny_model(self.family, "eager", alibi=True)
        ids, mask = left_padded_batch([5], seed=1)
        with self.assertRaisesRegex(ValueError, "config.alibi=True: ALiBi"):
            model.generate(ids, attention_mask=mask, cache_limit=3, max_new_tokens=2)
