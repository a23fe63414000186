"""Gemma 2 (eager only, soft-capping): the family oracles and transformers' own window on every layer."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class Gemma2FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "gemma2"
    tiny_config = {"layer_types": ("sliding_attention", "full_attention"), "query_pre_attn_scalar": 8}
    attention = ("eager",)
    notes = "attention soft-capping"
    native_window_switches = {"layer_types": ("sliding_attention",)}
