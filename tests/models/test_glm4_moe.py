"""GLM-4 MoE: the family oracles; mixture of experts, partial rotary, a dense first layer."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Glm4MoeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "glm4_moe"
    tiny_config = {
        "n_routed_experts": 4,
        "moe_intermediate_size": 16,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
    }
    notes = "mixture of experts"
