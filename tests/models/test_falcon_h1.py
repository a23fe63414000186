"""Falcon-H1: attention and Mamba 2 side by side in every layer (hybrid layers)."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin


class FalconH1FamilyTest(FamilyOracleMixin, RecurrentOracleMixin, unittest.TestCase):
    family = "falcon_h1"
    tiny_config = {"mamba_d_ssm": 32, "mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_state": 8, "mamba_chunk_size": 8}
    notes = "hybrid layers: attention and a Mamba 2 state in every layer"
