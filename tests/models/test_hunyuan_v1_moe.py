"""HunYuan MoE: the family oracles; it normalises keys after the rotation, so sinks are refused."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class HunyuanV1MoeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "hunyuan_v1_moe"
    tiny_config = {"num_experts": 4, "moe_topk": 2}
    notes = "mixture of experts; q/k norms after the rotation"
    sink_refusal = "it normalises keys after the rotation"
