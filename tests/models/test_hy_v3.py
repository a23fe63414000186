"""HY-V3: the family oracles; mixture of experts, q/k norms before the rotation."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class HyV3FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "hy_v3"
    tiny_config = {"num_experts": 4, "moe_intermediate_size": 16, "num_experts_per_tok": 2}
    notes = "mixture of experts, q/k norms"
