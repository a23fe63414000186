"""Mistral: the shared bounded-generation tests, plus its native `sliding_window` (the second oracle)."""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized

from tests.bounded_helpers import NEW
from tests.bounded_mixin import BoundedGenerationTesterMixin
from tests.common import ATTENTION, left_padded_batch, returned_cache
from tests.reference import native_sliding_window_model
from tests.sink_mixin import NativeWindowSinkTesterMixin


class MistralBoundedGenerationTest(BoundedGenerationTesterMixin, NativeWindowSinkTesterMixin, unittest.TestCase):
    family = "mistral"
    tiny_config = {"sliding_window": None}

    def native(self, oracle, ids, mask, **kwargs):
        """transformers' own run (`cache_limit=None`: nothing of cachelimit's is used)."""
        options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
        options.update(kwargs)
        return oracle.generate(ids, attention_mask=mask, cache_limit=None, **options)

    def assert_same_run(self, bounded, native):
        self.assertTrue(torch.equal(bounded.sequences, native.sequences))
        torch.testing.assert_close(torch.stack(bounded.logits, 1), torch.stack(native.logits, 1), atol=1e-5, rtol=0)

    @parameterized.expand(
        [(attn, limit, chunk) for attn in ATTENTION for limit, chunk in [(1, 3), (3, 2), (4, 5), (6, 1)]]
    )
    def test_chunked_prefill_equals_native_sliding_window(self, attn, limit, chunk):
        model = self.build(attn)
        ids, mask = left_padded_batch([14, 9], seed=limit)  # prompts longer than the window L + 1
        bounded = self.bounded(model, ids, mask, limit, prefill_chunk_size=chunk)
        self.assert_same_run(bounded, self.native(native_sliding_window_model(model, limit + 1), ids, mask))

    def test_prompt_within_window_equals_native_sliding_window(self):
        """A prompt of at most L + 1 tokens reads the same keys with full or windowed prefill."""
        model = self.build()
        ids, mask = left_padded_batch([5, 3], seed=3)
        bounded = self.bounded(model, ids, mask, 4)
        self.assert_same_run(bounded, self.native(native_sliding_window_model(model, 5), ids, mask))

    def test_beam_search_equals_native_sliding_window(self):
        model = self.build()
        ids, mask = left_padded_batch([11, 6], seed=4)
        options = dict(num_beams=3, num_return_sequences=2, output_scores=True)
        bounded = self.bounded(model, ids, mask, 3, prefill_chunk_size=4, **options)
        native = self.native(native_sliding_window_model(model, 4), ids, mask, **options)
        self.assertTrue(torch.equal(bounded.sequences, native.sequences))
        self.assertTrue(torch.equal(bounded.beam_indices, native.beam_indices))
        torch.testing.assert_close(bounded.sequences_scores, native.sequences_scores, atol=1e-5, rtol=0)

    def test_native_window_smaller_than_cache_limit_wins(self):
        model = self.build(sliding_window=4)  # at most 3 past keys per query
        ids, mask = left_padded_batch([12, 7], seed=5)
        bounded = self.bounded(model, ids, mask, 10)
        self.assertTrue(torch.equal(returned_cache(bounded).kept_lengths(), torch.tensor([3, 3])))
        self.assertEqual(returned_cache(bounded).layers[0].keys.shape[-2], 4)
        self.assert_same_run(bounded, self.native(model, ids, mask))  # the model's own window, unpatched path
        self.assert_matches_reference(model, bounded, mask, 3)
        chunked = self.bounded(model, ids, mask, 10, prefill_chunk_size=5)
        self.assert_same_run(chunked, self.native(model, ids, mask))

    def test_cache_limit_smaller_than_native_window_wins(self):
        model = self.build(sliding_window=9)
        ids, mask = left_padded_batch([12, 7], seed=6)
        bounded = self.bounded(model, ids, mask, 3)
        self.assertTrue(torch.equal(returned_cache(bounded).kept_lengths(), torch.tensor([3, 3])))
        self.assert_matches_reference(model, bounded, mask, 3)  # the native window still shapes the prefill
        chunked = self.bounded(model, ids, mask, 3, prefill_chunk_size=5)
        self.assert_same_run(chunked, self.native(native_sliding_window_model(model, 4), ids, mask))

    def test_native_window_none_is_bounded_by_cache_limit_alone(self):
        model = self.build(sliding_window=None)
        self.assertIsNone(model.config.sliding_window)
        ids, mask = left_padded_batch([12, 7], seed=7)
        bounded = self.bounded(model, ids, mask, 3)
        self.assertTrue(torch.equal(returned_cache(bounded).kept_lengths(), torch.tensor([3, 3])))
        self.assert_matches_reference(model, bounded, mask, 3)
