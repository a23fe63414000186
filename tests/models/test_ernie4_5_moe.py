"""ERNIE 4.5 MoE: the family oracles; mixture of experts, interleaved rotary pairs."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Ernie45MoeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "ernie4_5_moe"
    tiny_config = {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 16}
    notes = "mixture of experts, interleaved rotary pairs"
