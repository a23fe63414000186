"""MiniMax-M2: the family oracles; mixture of experts, q/k norms over all heads."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class MinimaxM2FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "minimax_m2"
    tiny_config = {"num_local_experts": 4, "num_experts_per_tok": 2}
    notes = "mixture of experts"
