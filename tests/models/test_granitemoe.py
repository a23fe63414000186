"""Granite MoE: the family oracles; mixture of experts, Granite's multipliers."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class GranitemoeFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "granitemoe"
    tiny_config = {"num_local_experts": 4, "num_experts_per_tok": 2}
    notes = "mixture of experts"
