"""JetMoE: the family oracles; mixture of attention heads (the keys and values are shared by the query experts)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class JetmoeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "jetmoe"
    tiny_config = {"kv_channels": 8, "num_local_experts": 4, "num_experts_per_tok": 2}
    notes = "mixture of attention and MLP experts"
