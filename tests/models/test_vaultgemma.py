"""VaultGemma (eager only, soft-capping): the family oracles, its own window and its alternating layers."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class VaultgemmaFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "vaultgemma"
    tiny_config = {"layer_types": ("sliding_attention", "full_attention"), "query_pre_attn_scalar": 8}
    attention = ("eager",)
    notes = "attention soft-capping"
    native_window_switches = {"layer_types": ("sliding_attention",)}
