"""LFM2: short-convolution layers with attention layers among them."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class Lfm2FamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "lfm2"
    tiny_config = {"layer_types": ("conv", "full_attention")}
    notes = "short-convolution layers (their state is transformers' own)"
