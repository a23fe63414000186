"""FlexOlmo: the family oracles; mixture of experts, q/k norms over all heads."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class FlexOlmoFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "flex_olmo"
    tiny_config = {"num_experts": 4, "num_experts_per_tok": 2}
    notes = "mixture of experts, q/k norms"
