"""GPT-2: the shared bounded-generation tests, plus its learned-position limit."""

from __future__ import annotations

import unittest

import torch

from tests.bounded_mixin import BoundedGenerationTesterMixin
from tests.common import PAD, left_padded_batch, returned_cache
from tests.sink_mixin import SinkTesterMixin


class GPT2BoundedGenerationTest(BoundedGenerationTesterMixin, SinkTesterMixin, unittest.TestCase):
    family = "gpt2"
    tiny_config = {"n_embd": 32, "n_head": 4, "n_positions": 256}
    notes = "at most `n_positions` tokens"

    def count_forwards(self, model) -> list[int]:
        calls = []
        handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
        self.addCleanup(handle.remove)
        return calls

    def test_past_n_positions_raises_before_any_forward(self):
        model = self.build()
        forwards = self.count_forwards(model)
        n_positions = model.config.n_positions
        ids, mask = left_padded_batch([10, 4], seed=0)
        # 10 real tokens + N new use positions 0 .. 10 + N - 2 (the last token is never fed back): N = n - 8 is too many
        for options in ({"max_new_tokens": n_positions - 8}, {"max_length": n_positions + 2}):
            with self.subTest(**options), self.assertRaisesRegex(ValueError, "n_positions"):
                model.generate(ids, attention_mask=mask, cache_limit=4, do_sample=False, **options)
        self.assertEqual(forwards, [])

    def test_run_up_to_n_positions_counts_real_tokens_only(self):
        """Positions are real-token indices, so an all-pad leading column does not count towards n_positions:
        the longest row (10 real tokens) may generate exactly n_positions - 10 tokens."""
        model = self.build()
        forwards = self.count_forwards(model)
        ids, mask = left_padded_batch([10, 4], seed=1)
        ids = torch.cat([torch.full((2, 1), PAD), ids], 1)
        mask = torch.cat([torch.zeros(2, 1, dtype=mask.dtype), mask], 1)
        new = model.config.n_positions - 10
        output = self.bounded(model, ids, mask, 5, max_new_tokens=new)
        self.assertEqual(output.sequences.shape[1], ids.shape[1] + new)
        self.assertEqual(len(forwards), new)  # the hook that saw no forward above does count them
        self.assertTrue(torch.equal(returned_cache(output).kept_lengths(), torch.tensor([5, 5])))
        self.assert_matches_reference(model, output, mask, 5)
