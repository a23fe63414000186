"""XGLM: the family oracles; sinusoidal absolute positions (sinks keep theirs). The tiny config's table ends at 12
positions, before the oracles' runs do (up to 17 columns): the model extends its table as the sequence grows, which
a bounded run must let it do (its cache reports every column seen, not the ones it keeps)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class XglmFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "xglm"
    tiny_config = {
        "d_model": 32,
        "ffn_dim": 64,
        "attention_heads": 4,
        "max_position_embeddings": 12,
        "pad_token_id": 0,
    }
    attention = ("eager",)
    notes = "its sinusoidal table grows past `max_position_embeddings`"
