"""Llama 4 (text): chunked-attention RoPE layers and global NoPE layers (every second one here, every fourth in the
real checkpoints) whose queries get an attention temperature of the true position."""

from __future__ import annotations

import unittest

from tests.chunked_mixin import ChunkedOracleMixin
from tests.family_mixin import FamilyOracleMixin


class Llama4TextFamilyTest(FamilyOracleMixin, ChunkedOracleMixin, unittest.TestCase):
    family = "llama4_text"
    tiny_config = {
        "no_rope_layer_interval": 2,
        "intermediate_size": 16,
        "intermediate_size_mlp": 32,
        "num_local_experts": 2,
        "initializer_range": 0.1,  # larger random weights: attention is far from uniform, so what it reads shows
        "floor_scale": 4,  # the temperature's length scale (8192), shrunk with the sequences: it acts from position 3
    }
    notes = "chunked layers (a query reads only its own chunk); NoPE layers' temperature from the true position"
