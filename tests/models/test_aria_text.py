"""Aria's text model: the family oracles; mixture of experts with shared experts."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class AriaTextFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "aria_text"
    tiny_config = {"moe_num_experts": 4, "moe_topk": 2, "moe_num_shared_experts": 1}
    notes = "mixture of experts"
