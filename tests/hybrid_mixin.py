"""Hybrid models (`config.layer_types` with full and sliding attention layers): each layer type keeps its own window.

A sliding layer keeps min(L, W - 1) positions and applies its window W, a full layer keeps L. Oracles: transformers'
own run of the same hybrid model when the bound does not cut (L >= the whole sequence: only the native windows
act), and the banded reference with one visibility per layer type when it does. A test declaration mixes this in
with `hybrid_switches`: the config overrides (besides `sliding_window`) that make its layers alternate.
"""

from __future__ import annotations

import torch
from parameterized import parameterized

from cachelimit import BoundedLayer
from tests.common import kv_layout, left_padded_batch, returned_cache
from tests.family_mixin import ATTENTION, NEW, OracleHelpers
from tests.reference import generated_step_logits
from tests.sink_helpers import SinkHelpers
from tests.sink_reference import StreamingReference


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
        groups = [group.name for group in returned_cache(bounded).groups]  # one group per attention type
        self.assertEqual(sorted(groups), ["full_attention", "sliding_attention"])
        native = self.generate(model, ids, mask, None)  # transformers' own hybrid run, nothing of cachelimit's
        self.assert_same_run(bounded, native)
        kept = returned_cache(bounded).kept_lengths_by_type()
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
        kept = returned_cache(bounded).kept_lengths_by_type()
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

    @parameterized.expand([(None,), (2,)])
    def test_hybrid_sinks_with_smaller_sliding_window_match_reference(self, chunk):
        """The sliding layers keep min(L, W - 1) = 3 positions (2 sinks, 1 recent), the full layers L = 6 (2 sinks, 4
        recent): each type runs StreamingLLM over what it keeps, in its own position frame."""
        model = self.build_hybrid(window=4)
        ids, mask = left_padded_batch([9, 3], seed=5)
        out, logits = self.run_sinks(model, ids, mask, 6, 2, 14, prefill_chunk_size=chunk)
        kept = returned_cache(out).kept_lengths_by_type()
        self.assertTrue(torch.equal(kept["sliding_attention"], torch.tensor([3, 3])))
        self.assertTrue(torch.equal(kept["full_attention"], torch.tensor([6, 6])))
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 6, 2, window_prefill=chunk is not None)
        if not self.uses_rope:
            return
        # the comparison can fail: one kept count for both types, or keys left at their absolute positions, differ
        # from the run by 10x more than the right reference does (a family with a large RoPE base moves little)
        prompt = ids[:1, mask[0].bool()]
        right = StreamingReference(model, 6, 2).greedy(prompt, 14, chunk is not None)[1]
        noise = max((logits[0] - right).abs().max().item(), 1e-6)
        for wrong in (dict(every_type_keeps=6), dict(cache_relative=False)):
            expected = StreamingReference(model, 6, 2, **wrong).greedy(prompt, 14, chunk is not None)[1]
            self.assertGreater((logits[0] - expected).abs().max().item(), 10 * noise, wrong)

    def test_hybrid_sinks_filling_the_sliding_window_refused(self):
        """Sinks must leave a recent position in every type's window: S = 3 fills what W = 4 keeps."""
        model = self.build_hybrid(window=4)
        ids, mask = left_padded_batch([5], seed=5)
        with self.assertRaisesRegex(ValueError, r"num_sink_tokens.*\[0, 2\].*sliding_window=4"):
            model.generate(ids, attention_mask=mask, cache_limit=6, num_sink_tokens=3, max_new_tokens=2)


class KVSharingOracleMixin(OracleHelpers, SinkHelpers):
    """Layers that read another layer's keys and values (Gemma 3n, Gemma 4: the last `num_kv_shared_layers`, each
    reading the last earlier layer of its type): they keep no cache of their own, and read the bounded cache of the
    layer they share with, under that layer's plan and mask. Five layers: two of their own, three sharing."""

    def build_sharing(self, attn=None, window: int = 4):
        model = self.build(attn, layers=5, sliding_window=window)
        self.assertEqual(model.config.num_kv_shared_layers, 3)
        return model

    def test_sharing_layers_keep_no_cache(self):
        model = self.build_sharing()
        ids, mask = left_padded_batch([9, 5], seed=1)
        cache = returned_cache(self.generate(model, ids, mask, 6))
        self.assertEqual(len(cache.bounded_layers), 2)  # the two layers of their own
        self.assertTrue(all(layer.keys is None for layer in cache.layers if not isinstance(layer, BoundedLayer)))
        layout = kv_layout(model)  # transformers' own cache keeps the same two layers
        self.assertEqual(len(layout), 2)
        sliding, full = layout  # rings of min(L, W - 1) + 1 = 4 and L + 1 = 7 slots, 2 rows, float32
        self.assertEqual(cache.kv_bytes(), 2 * 4 * ((sliding.key + sliding.value) * 4 + (full.key + full.value) * 7))

    @parameterized.expand([(attn,) for attn in ATTENTION])
    def test_sharing_not_cutting_equals_transformers(self, attn):
        model = self.build_sharing(attn)
        ids, mask = left_padded_batch([9, 5], seed=1)
        self.assert_same_run(self.generate(model, ids, mask, 40), self.generate(model, ids, mask, None))

    @parameterized.expand([(attn, chunk) for attn in ATTENTION for chunk in (None, 2)])
    def test_sharing_cutting_matches_banded_reference(self, attn, chunk):
        model = self.build_sharing(attn)
        ids, mask = left_padded_batch([11, 4], seed=2)
        bounded = self.generate(model, ids, mask, 6, prefill_chunk_size=chunk)
        expected = self.assert_reference(model, bounded, mask, 6, window_prefill=chunk is not None)
        wrong = generated_step_logits(
            model, bounded.sequences, mask, 6, window_prefill=chunk is not None, every_layer_reads="full_attention"
        )
        self.assertGreater((wrong - expected).abs().max().item(), 100 * 1e-5)

    @parameterized.expand([(None,), (3,)])
    def test_sharing_sinks_match_reference(self, chunk):
        model = self.build_sharing()
        ids, mask = left_padded_batch([9, 3], seed=4)
        out, logits = self.run_sinks(model, ids, mask, 6, 2, 14, prefill_chunk_size=chunk)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 6, 2, window_prefill=chunk is not None)
