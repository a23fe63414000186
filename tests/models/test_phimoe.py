"""PhiMoE: the family oracles and transformers' own `sliding_window`."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class PhimoeFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "phimoe"
    tiny_config = {"num_local_experts": 4, "num_experts_per_tok": 2}
    notes = "mixture of experts"
