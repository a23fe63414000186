"""Hybrid models (`config.layer_types` with full and sliding attention layers): each layer type keeps its own window.

A sliding layer keeps min(L, W - 1) positions and applies its window W, a full layer keeps L. Oracles: transformers'
own run of the same hybrid model when the bound does not cut (L >= the whole sequence: only the native windows
act), and the banded reference with one visibility per layer type when it does. A test declaration mixes this in
with `hybrid_switches`: the config overrides (besides `sliding_window`) that make its layers alternate.
"""

from __future__ import annotations

import torch
from parameterized import parameterized

from tests.common import left_padded_batch
from tests.family_mixin import ATTENTION, NEW, OracleHelpers
from tests.reference import generated_step_logits
from tests.sink_mixin import SinkHelpers


class HybridOracleMixin(OracleHelpers, SinkHelpers):
    hybrid_switches: dict = {"layer_types": ("sliding_attention", "full_attention")}

    def build_hybrid(self, attn=None, window: int = 4, **overrides):
        model = self.build(attn, sliding_window=window, **{**self.hybrid_switches, **overrides})
        self.assertEqual(set(model.config.layer_types), {"sliding_attention", "full_attention"})
        return model

    @parameterized.expand([(attn,) for attn in ATTENTION])
    def test_hybrid_not_cutting_equals_transformers(self, attn):
        """The issue's case: cache_limit=40 on a 17-token run; only the sliding layers' own window (W=4) acts."""
        model = self.build_hybrid(attn)
        ids, mask = left_padded_batch([9, 5], seed=1)
        bounded = self.generate(model, ids, mask, 40)
        groups = [group.name for group in bounded.past_key_values.groups]  # one group per attention type
        self.assertEqual(sorted(groups), ["full_attention", "sliding_attention"])
        native = self.generate(model, ids, mask, None)  # transformers' own hybrid run, nothing of cachelimit's
        self.assert_same_run(bounded, native)
        kept = bounded.past_key_values.kept_lengths_by_type()
        seen = torch.tensor([9, 5]) + NEW - 1
        self.assertTrue(torch.equal(kept["sliding_attention"], seen.clamp(max=3)))
        self.assertTrue(torch.equal(kept["full_attention"], seen))
        self.assert_reference(model, bounded, mask, 40)

    @parameterized.expand([(attn, chunk) for attn in ATTENTION for chunk in (None, 2)])
    def test_hybrid_cutting_matches_banded_reference(self, attn, chunk):
        """L = 6 cuts the full layers; the sliding layers keep min(L, W - 1) = 3."""
        model = self.build_hybrid(attn)
        ids, mask = left_padded_batch([11, 4], seed=2)
        bounded = self.generate(model, ids, mask, 6, prefill_chunk_size=chunk)
        kept = bounded.past_key_values.kept_lengths_by_type()
        self.assertTrue(torch.equal(kept["sliding_attention"], torch.tensor([3, 3])))
        self.assertTrue(torch.equal(kept["full_attention"], torch.tensor([6, 6])))
        expected = self.assert_reference(model, bounded, mask, 6, window_prefill=chunk is not None)
        # the comparison can fail: one mask for every layer (the silent bug) is far outside the tolerance
        for one_type in ("full_attention", "sliding_attention"):
            wrong = generated_step_logits(
                model, bounded.sequences, mask, 6, window_prefill=chunk is not None, every_layer_reads=one_type
            )
            self.assertGreater((wrong - expected).abs().max().item(), 100 * 1e-5)

    def test_hybrid_sinks_match_reference(self):
        """Sinks with every layer keeping L (W - 1 >= L): each layer type moves its sinks with its own rotary."""
        model = self.build_hybrid(window=8)
        ids, mask = left_padded_batch([9, 3], seed=4)
        out, logits = self.run_sinks(model, ids, mask, 5, 2, 14)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 5, 2)

    def test_hybrid_sinks_with_smaller_sliding_window_refused(self):
        model = self.build_hybrid(window=4)
        ids, mask = left_padded_batch([5], seed=5)
        with self.assertRaisesRegex(ValueError, "num_sink_tokens.*sliding_window=4"):
            model.generate(ids, attention_mask=mask, cache_limit=6, num_sink_tokens=1, max_new_tokens=2)
