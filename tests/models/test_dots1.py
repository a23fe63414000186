"""dots.llm1: the family oracles, transformers' own window and its sliding/full layer mix."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Dots1FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "dots1"
    tiny_config = {
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "moe_intermediate_size": 16,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
    }
    notes = "mixture of experts, q/k norms"
    native_window_switches = {"layer_types": ("sliding_attention",)}
