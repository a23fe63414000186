"""Cohere 2: sliding layers with RoPE, full-attention layers without positions."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Cohere2FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "cohere2"
    # larger random weights: attention far from uniform (and its logit scale, 1/16, far from hiding it)
    tiny_config = {"layer_types": ("sliding_attention", "full_attention"), "initializer_range": 0.1}
    notes = "full layers are NoPE (their sinks keep their keys as written); interleaved rotary pairs"
    native_window_switches = {"layer_types": ("sliding_attention",)}
