"""BioGPT: the family oracles; learned absolute positions, offset by 2 inside the model as in OPT."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class BiogptFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "biogpt"
    tiny_config = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 256,
        "pad_token_id": 0,
    }
    notes = "at most `max_position_embeddings` tokens; the model offsets its position table by 2"
