"""GPT-OSS (eager only): 128-token sliding layers alternate with full layers; learned per-head sink logits."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class GptOssFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "gpt_oss"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "intermediate_size": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "initializer_range": 0.1,  # larger random weights: attention far from uniform, so where sinks sit shows
    }
    attention = ("eager",)
    notes = (
        "learned per-head sink logits (`s_aux`: not cached tokens, kept as they are); YaRN RoPE; mixture of experts"
    )
    native_window_switches = {"layer_types": ("sliding_attention",)}
