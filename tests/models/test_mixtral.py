"""Mixtral: the family oracles and transformers' own `sliding_window`."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class MixtralFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "mixtral"
    tiny_config = {"sliding_window": None, "num_local_experts": 4, "num_experts_per_tok": 2}
    notes = "mixture of experts"
