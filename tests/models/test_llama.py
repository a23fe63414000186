"""Llama: the shared bounded-generation and attention-sink tests."""

from __future__ import annotations

import unittest

from cachelimit.hf.compat import rope_config
from tests.bounded_mixin import BoundedGenerationTesterMixin
from tests.common import left_padded_batch
from tests.sink_mixin import SinkTesterMixin


class LlamaBoundedGenerationTest(BoundedGenerationTesterMixin, SinkTesterMixin, unittest.TestCase):
    family = "llama"

    def test_sinks_with_yarn_rope_match_reference(self):
        """YaRN folds an attention factor into cos/sin; moving sink keys must not apply it twice."""
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 1e4}
        model = self.sink_build(**rope_config(yarn))
        self.assertNotEqual(model.model.rotary_emb.attention_scaling, 1.0)
        ids, mask = left_padded_batch([7, 11], seed=3)
        out, logits = self.run_sinks(model, ids, mask, 6, 2, 24)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 6, 2)
