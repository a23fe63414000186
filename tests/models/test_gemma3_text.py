"""Gemma 3 text (per-layer-type rotary bases, q/k norms): the family oracles and transformers' own window."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Gemma3TextFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "gemma3_text"
    tiny_config = {"layer_types": ("sliding_attention", "full_attention"), "query_pre_attn_scalar": 8}
    notes = "q/k norms"
    native_window_switches = {"layer_types": ("sliding_attention",)}
