"""Granite SWA: sliding and full layers, learned per-head sink logits, one RoPE base per layer (0: NoPE)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


def layer_bases(layers: int) -> list[float]:
    """A NoPE full layer after each sliding one, the sliding layers on two bases (the first not the
    config's `rope_theta`, so a rotary at the wrong base shows)."""
    return [(500000.0, 0.0, 10000.0, 0.0)[i % 4] for i in range(layers)]


#: Granite SWA's attention (Granite MoE SWA shares it)
SWA_ATTENTION = {
    "layer_types": ("sliding_attention", "full_attention"),
    "layer_rope_theta": layer_bases,
    "initializer_range": 0.1,
}


class GraniteSwaFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "granite_swa"
    tiny_config = SWA_ATTENTION
    attention = ("eager",)
    notes = "learned sink logits (`s_aux`, kept as they are); one RoPE base per layer, 0 for NoPE"
    native_window_switches = {"layer_types": ("sliding_attention",)}
