"""Ministral 3: the family oracles and transformers' own window. It scales each query by its absolute position
(`llama_4_scaling_beta`, on past `original_max_position_embeddings`): the tiny config sets that boundary at 1
position so the scaling acts inside every run, where windows must stay exact, and a beta of 1 (the checkpoints: 0.1)
so that its effect on these tiny logits is well past the tolerance; sinks, whose StreamingLLM positions would change
the scale, are refused while the scaling is on and served without it."""

from __future__ import annotations

import unittest

from tests.common import left_padded_batch
from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin

SCALED = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 1}


class Ministral3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "ministral3"
    tiny_config = {"rope_parameters": {**SCALED, "llama_4_scaling_beta": 1.0}}
    notes = "queries scaled by their absolute position (`llama_4_scaling_beta`)"
    sink_refusal = "llama_4_scaling_beta"

    def test_sinks_without_query_scaling_match_reference(self):
        model = self.sink_build(rope_parameters={**SCALED, "llama_4_scaling_beta": 0.0})
        ids, mask = left_padded_batch([9, 3], seed=4)
        out, logits = self.run_sinks(model, ids, mask, 5, 2, 14)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 5, 2)

    def test_the_scaling_acts_in_these_runs(self):
        """The window oracles above can fail on the scaling: without it the same weights give other logits."""
        ids, mask = left_padded_batch([9, 3], seed=4)
        scaled, _ = self.run_sinks(self.build(), ids, mask, 5, 0, 6)
        plain = self.build(rope_parameters={**SCALED, "llama_4_scaling_beta": 0.0})
        unscaled, _ = self.run_sinks(plain, ids, mask, 5, 0, 6)
        self.assertGreater((scaled.logits[-1] - unscaled.logits[-1]).abs().max().item(), 1e-3)
