"""SmolLM3: the family oracles and transformers' own window (`use_sliding_window`)."""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized

from tests.common import ATTENTION, left_padded_batch
from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class SmolLM3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "smollm3"
    tiny_config = {"no_rope_layer_interval": 2}
    notes = "NoPE layers keep their sinks as written"
    native_window_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention",)}
    hybrid_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention", "full_attention")}

    def test_sinks_with_nope_layers_match_reference(self):
        """Layers without positions (every second one here) keep their sinks as written; the others rotate them."""
        model = self.sink_build(no_rope_layer_interval=2)
        self.assertEqual(list(model.config.no_rope_layers), [1, 0])
        ids, mask = left_padded_batch([9, 3], seed=4)
        out, logits = self.run_sinks(model, ids, mask, 5, 2, 14)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 5, 2)

    @parameterized.expand([(attn, beams) for attn in ATTENTION for beams in (1, 2)])
    def test_nope_sinks_chunked_prefill_not_cutting_equals_transformers(self, attn, beams):
        """Issue 20, defect 1: sinks with a chunked prefill on a model with NoPE layers crashed (the RoPE layers copy
        their sinks per query, the NoPE layers did not, under one mask). A limit that never cuts gives transformers'
        own run, sinks or not."""
        model = self.sink_build(attn, no_rope_layer_interval=2, layers=4)
        self.assertEqual(list(model.config.no_rope_layers), [1, 0, 1, 0])
        ids, mask = left_padded_batch([10], seed=6)
        options = dict(num_beams=beams, prefill_chunk_size=3, output_scores=True)
        bounded, _ = self.run_sinks(model, ids, mask, 30, 2, 4, **options)
        native = self.generate(model, ids, mask, None, max_new_tokens=4, **options)
        self.assertTrue(torch.equal(bounded.sequences, native.sequences))
        torch.testing.assert_close(torch.stack(bounded.scores), torch.stack(native.scores), atol=1e-5, rtol=0)
