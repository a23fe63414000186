"""Qwen 3.5 (text): gated delta net (linear attention) layers between full-attention layers with partial RoPE."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin

LINEAR = {
    "layer_types": ("linear_attention", "full_attention"),
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
}


class Qwen35TextFamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "qwen3_5_text"
    tiny_config = LINEAR
    notes = "linear-attention layers (their state is transformers' own); partial rotary"
