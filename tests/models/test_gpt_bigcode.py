"""GPTBigCode (StarCoder 1, SantaCoder): the family oracles; multi-query attention (one key/value head, split from
one fused projection, as the checkpoints have it) and learned absolute positions."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class GptBigcodeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "gpt_bigcode"
    tiny_config = {"n_embd": 32, "n_head": 4, "n_positions": 256, "multi_query": True, "pad_token_id": 0}
    notes = "multi-query attention; at most `n_positions` tokens"
