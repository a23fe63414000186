"""MiMo-V2-Flash: sliding layers with learned per-head sink logits and twice the KV heads, full layers; values have
their own head dim."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class MimoV2FlashFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "mimo_v2_flash"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "v_head_dim": 4,
        "initializer_range": 0.1,
    }
    attention = ("eager",)
    notes = "learned sink logits (`s_aux`, kept as they are) and twice the KV heads on sliding layers; own value dim"
    native_window_switches = {"layer_types": ("sliding_attention",)}
