"""Solar Open: the family oracles; mixture of experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class SolarOpenFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "solar_open"
    tiny_config = {
        "n_routed_experts": 4,
        "moe_intermediate_size": 16,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
    }
    notes = "mixture of experts"
