"""CodeGen: the family oracles on windows (interleaved partial rotary, `rotary_dim` of the head, from a sinusoidal table
of `n_positions` rows), sinks moved with its own (tensor, sin, cos) rotation (the table read where each
release keeps it: `compat.rotary_table`)."""

from __future__ import annotations

import unittest

import transformers

from tests.common import ATTENTION
from tests.family_mixin import FamilyOracleMixin


class CodegenFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "codegen"
    tiny_config = {"n_embd": 32, "n_head": 4, "rotary_dim": 4, "n_positions": 256, "pad_token_id": 0}
    notes = "interleaved partial rotary from a table of `n_positions` rows"
    attention = ATTENTION if transformers.CodeGenForCausalLM._supports_sdpa else ("eager",)  # 4.x: eager only
