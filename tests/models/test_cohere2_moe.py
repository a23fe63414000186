"""Cohere 2 MoE: as Cohere 2 (sliding layers rotate, full layers are NoPE), and its dense prefix layers rotate even as
full layers (`prefix_dense_sliding_window_pattern` 1: the attention's `force_rope`)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


def _layer_types(layers: int) -> list[str]:
    """A dense full-attention first layer (it rotates), then sliding and NoPE full layers alternating."""
    return ["full_attention"] + [("sliding_attention", "full_attention")[i % 2] for i in range(layers - 1)]


class Cohere2MoeFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "cohere2_moe"
    tiny_config = {
        "layer_types": _layer_types,
        "mlp_layer_types": lambda layers: ["dense"] + ["sparse"] * (layers - 1),
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "initializer_range": 0.1,
    }
    notes = "NoPE full layers, except the dense prefix (its `force_rope`); mixture of experts"
    native_window_switches = {"layer_types": ("sliding_attention",)}
