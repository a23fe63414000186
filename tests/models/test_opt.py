"""opt: the family oracles (banded reference, attention-sink reference, cache bound)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class OptFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "opt"
    tiny_config = {
        "hidden_size": 32,
        "ffn_dim": 64,
        "num_attention_heads": 4,
        "word_embed_proj_dim": 32,
        "max_position_embeddings": 256,
        "pad_token_id": 0,
    }
    notes = "at most `max_position_embeddings` tokens; the model offsets its position table by 2"
