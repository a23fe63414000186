"""Granite MoE (shared experts): the family oracles."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class GranitemoesharedFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "granitemoeshared"
    tiny_config = {"num_local_experts": 4, "num_experts_per_tok": 2, "shared_intermediate_size": 32}
    notes = "mixture of experts with shared experts"
