"""Qwen3-MoE: the family oracles and transformers' own window (`use_sliding_window`)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class Qwen3MoeFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "qwen3_moe"
    tiny_config = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    notes = "mixture of experts, q/k norms"
    native_window_switches = {"use_sliding_window": True}
