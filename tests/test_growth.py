"""A large `cache_limit` is a cap, not a preallocation: the ring grows with what it holds (issue 8).

Every run crosses growth boundaries (the ring reallocated to max(needed, 2 x allocated) slots, up to L - S + 1,
as `tests.growth_spec` specifies) and is compared with the independent references the family tests use: the
banded full-sequence forward, the StreamingLLM reference for sinks, or the unbounded run where the limit never
cuts. Bytes are counted exactly after every forward. One test class per supported family (from cachelimit's
family registry), like the per-family modules.
"""

from __future__ import annotations

import contextlib
import unittest
from functools import partial

import torch
from parameterized import parameterized

import cachelimit
from cachelimit import BoundedCache
from cachelimit.core.layers import BoundedLayer
from cachelimit.core.policy import MAX_CACHE_LIMIT
from cachelimit.families.table import FAMILIES
from cachelimit.hf import compat
from cachelimit.hf.compat import passed_cache
from tests.common import (
    VOCAB,
    build_tiny_model,
    declared,
    given_cache,
    kv_layout,
    left_padded_batch,
    not_served_here,
    refused_as_restarting,
    returned_cache,
    skip_where_sinks_are_refused,
    skip_where_the_family_refuses_sinks,
)
from tests.growth_spec import forward_widths, ring_capacities
from tests.layer_masks import attention_types, kept_limit
from tests.reference import extended_mask, generated_step_logits
from tests.sink_mixin import SinkTesterMixin
from tests.test_window_cache import expected_kv_bytes

ATOL = 1e-5


class GrowthTesterMixin:
    family: str
    uses_rope: bool
    sink_atol = SinkTesterMixin.sink_atol
    assert_sinks_match_reference = SinkTesterMixin.assert_sinks_match_reference

    def setUp(self):
        super().setUp()
        reason = not_served_here(self.family)
        if reason is not None:
            self.skipTest(reason)

    def build(self, attn: str | None = None, layers: int = 2):
        attentions = declared(self.family).attention
        attn = attn or attentions[-1]  # sdpa where transformers has it
        if attn not in attentions:
            self.skipTest(f"{self.family} runs with attention {attentions} only")
        return build_tiny_model(self.family, attn, layers=layers)

    def generate(self, model, ids, mask, limit, new, **kwargs):
        if kwargs.get("num_sink_tokens"):
            skip_where_the_family_refuses_sinks(self, self.family)
            skip_where_sinks_are_refused(self, model)
        options = dict(max_new_tokens=new, do_sample=False, return_dict_in_generate=True, output_logits=True)
        return model.generate(ids, attention_mask=mask, cache_limit=limit, **{**options, **kwargs})

    @contextlib.contextmanager
    def bytes_after_each_forward(self, model):
        """Yields a list that receives (columns seen, kv_bytes) after every forward of a bounded run."""
        seen: list[tuple[int, int]] = []

        def after_forward(module, args, kwargs, output):
            cache = passed_cache(kwargs)
            if isinstance(cache, BoundedCache):
                seen.append((cache.get_seq_length(), cache.kv_bytes()))

        # the decoder: transformers 4.x runs prefill chunks through `forward`, past the top module's hooks, and
        # OPT's causal LM calls its decoder directly, past the base model
        handle = compat.decoder_body(model).register_forward_hook(after_forward, with_kwargs=True)
        try:
            yield seen
        finally:
            handle.remove()

    def assert_grown_exactly(self, model, seen, batch, limit, sinks, widths):
        """kv_bytes after each forward is the exact size of a ring grown by the rule; without sinks it is also
        below twice what an unbounded cache holds for the same columns (issue 8's memory target)."""
        self.assertEqual([columns for columns, _ in seen], [sum(widths[: i + 1]) for i in range(len(widths))])
        capacities = ring_capacities(widths, limit - sinks + 1)
        expected = [expected_kv_bytes(model, batch, limit, sinks, c) for c in capacities]
        self.assertEqual([held for _, held in seen], expected)
        if sinks == 0:
            per_column = sum(layer.key + layer.value for layer in kv_layout(model)) * batch * 4  # float32
            for columns, held in seen:
                self.assertLess(held, 2 * per_column * columns, f"{columns} columns")

    # ---- limits around the prompt length, greedy against the banded reference ------------------------------------
    @parameterized.expand([("sdpa", 7), ("sdpa", 8), ("sdpa", 9), ("eager", 9), ("sdpa", 11), ("sdpa", 40)])
    def test_limits_around_the_prompt_length(self, attn, limit):
        model = self.build(attn)
        ids, mask = left_padded_batch([5, 8], seed=limit)  # width 8: L = P - 1, P, P + 1, P + 3, far above
        new = 12
        with self.bytes_after_each_forward(model) as seen:
            output = self.generate(model, ids, mask, limit, new)
        expected = generated_step_logits(model, output.sequences, mask, limit)
        torch.testing.assert_close(torch.stack(output.logits, 1), expected, atol=ATOL, rtol=0)
        self.assert_grown_exactly(model, seen, 2, limit, 0, forward_widths(8, None, new))

    @parameterized.expand([(20, 3), (9, 2)])
    def test_growth_during_chunked_prefill(self, limit, chunk):
        model = self.build()
        ids, mask = left_padded_batch([13, 6], seed=chunk)
        new = 10
        run = partial(self.generate, model, ids, mask, limit, new, prefill_chunk_size=chunk)
        if refused_as_restarting(self, model, run):
            return
        with self.bytes_after_each_forward(model) as seen:
            output = self.generate(model, ids, mask, limit, new, prefill_chunk_size=chunk)
        expected = generated_step_logits(model, output.sequences, mask, limit, window_prefill=True)
        torch.testing.assert_close(torch.stack(output.logits, 1), expected, atol=ATOL, rtol=0)
        self.assert_grown_exactly(model, seen, 2, limit, 0, forward_widths(13, chunk, new))

    def test_growth_with_beams(self):
        """Beam search reorders rows at every step while the ring grows (7 -> 14 -> 28 -> 31 slots)."""
        model = self.build()
        ids, mask = left_padded_batch([4, 7], seed=5)
        beams, new, limit = 3, 26, 30
        with self.bytes_after_each_forward(model) as seen:
            output = self.generate(model, ids, mask, limit, new, num_beams=beams, num_return_sequences=beams)
        expected = generated_step_logits(model, output.sequences, mask.repeat_interleave(beams, 0), limit)
        logits = torch.stack(output.logits, 1)  # running-beam order
        torch.testing.assert_close(logits[output.beam_indices, torch.arange(new)], expected, atol=ATOL, rtol=0)
        self.assert_grown_exactly(model, seen, 2 * beams, limit, 0, forward_widths(7, None, new))

    # ---- sinks: the sink slots stay put while the ring behind them grows ------------------------------------------
    @parameterized.expand([(2, 16, [3], None), (4, 14, [2, 7], None), (2, 12, [9, 4], 2)])
    def test_growth_with_sinks(self, sinks, limit, lengths, chunk):
        model = self.build()
        ids, mask = left_padded_batch(lengths, seed=sinks)
        new = 2 * limit + 4  # grows several times, fills, then wraps
        run = partial(self.generate, model, ids, mask, limit, new, num_sink_tokens=sinks, prefill_chunk_size=chunk)
        if chunk is not None and refused_as_restarting(self, model, run):
            return
        with self.bytes_after_each_forward(model) as seen:
            out = run()
        logits = torch.stack(out.logits, 1)
        self.assert_sinks_match_reference(
            model, ids, mask, out, logits, limit, sinks, window_prefill=chunk is not None
        )
        self.assert_grown_exactly(model, seen, len(lengths), limit, sinks, forward_widths(ids.shape[1], chunk, new))

    # ---- a huge limit is a cap: the run is the unbounded run, and the cache holds what the tokens need -----------
    @parameterized.expand([(2**30, None), (MAX_CACHE_LIMIT, None), (2**30, 4)])
    def test_huge_limit_runs_like_unbounded(self, limit, sinks):
        model = self.build()
        ids, mask = left_padded_batch([6, 3], seed=1)
        new = 20
        kept = {kind: kept_limit(model.config, kind, limit, sinks or 0) for kind in attention_types(model.config)}
        if sinks and min(kept.values()) < limit:
            # a layer type whose own pattern (a sliding window, chunks) keeps fewer positions than the limit runs
            # StreamingLLM over those (README "Semantics"): its sinks outlive its window, so the run is not the
            # unbounded one; its oracle is the StreamingLLM reference per layer type
            output = self.generate(model, ids, mask, limit, new, num_sink_tokens=sinks)
            logits = torch.stack(output.logits, 1)
            self.assert_sinks_match_reference(model, ids, mask, output, logits, limit, sinks)
            real = mask.sum(1) + new - 1  # the last token is never fed back
            for kind, held in returned_cache(output).kept_lengths_by_type().items():
                self.assertEqual(held.tolist(), real.clamp(max=kept[kind]).tolist(), kind)
            return
        with self.bytes_after_each_forward(model) as seen:
            output = self.generate(model, ids, mask, limit, new, num_sink_tokens=sinks)
        unbounded = self.generate(model, ids, mask, None, new)
        self.assertTrue(torch.equal(output.sequences, unbounded.sequences))
        torch.testing.assert_close(torch.stack(output.logits, 1), torch.stack(unbounded.logits, 1), atol=ATOL, rtol=0)
        self.assert_grown_exactly(model, seen, 2, limit, sinks or 0, forward_widths(6, None, new))

    # ---- continuing a returned cache that is still growing -----------------------------------------------------------
    def test_continuation_across_growth_equals_one_call(self):
        model = self.build()
        ids, mask = left_padded_batch([7, 3], seed=11)
        first = self.generate(model, ids, mask, 24, 4)  # 10 columns: the ring holds 11 of its 25 slots
        bounded = next(layer for layer in returned_cache(first).layers if isinstance(layer, BoundedLayer))
        self.assertEqual(bounded.keys.shape[-2], ring_capacities([7, 1, 1, 1], 25)[-1])
        ext = extended_mask(mask, first.sequences)
        second = self.generate(model, first.sequences, ext, 24, 26, **given_cache(returned_cache(first)))
        whole = self.generate(model, ids, mask, 24, 30)
        self.assertTrue(torch.equal(second.sequences, whole.sequences))
        logits = torch.stack(first.logits + second.logits, 1)
        torch.testing.assert_close(logits, torch.stack(whole.logits, 1), atol=ATOL, rtol=0)

    def test_new_prompt_tokens_after_a_growing_cache_match_reference(self):
        """A multi-token forward on a returned cache grows the ring past its full size in one step."""
        model = self.build()
        ids, mask = left_padded_batch([5, 2], seed=12)
        first = self.generate(model, ids, mask, 12, 3)
        extra = torch.randint(1, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
        prompt = torch.cat([first.sequences, extra], 1)
        prompt_mask = extended_mask(mask, prompt)
        run = partial(self.generate, model, prompt, prompt_mask, 12, 6, **given_cache(returned_cache(first)))
        if refused_as_restarting(self, model, run):
            return
        second = run()
        spans = [(0, ids.shape[1]), (first.sequences.shape[1] - 1, prompt.shape[1])]
        expected = generated_step_logits(model, second.sequences, prompt_mask, 12, full_attention_spans=spans)
        torch.testing.assert_close(torch.stack(second.logits, 1), expected, atol=ATOL, rtol=0)

    def test_reordered_and_repeated_rows_of_a_growing_cache_continue_exactly(self):
        """`reorder_cache` and `batch_repeat_interleave` on a cache whose ring is not full yet move the buffers
        and the row state together: continuing equals continuing the reordered rows' own caches."""
        model = self.build()
        ids, mask = left_padded_batch([7, 2, 5], seed=6)
        options = dict(num_sink_tokens=1)
        first = self.generate(model, ids, mask, 40, 5, **options)
        full_mask = extended_mask(mask, first.sequences)
        index = torch.tensor([2, 0, 0, 1])
        moved = returned_cache(self.generate(model, ids, mask, 40, 5, **options))
        moved.batch_repeat_interleave(2)
        moved.reorder_cache(torch.tensor([4, 0, 1, 2]))  # rows 2, 0, 0, 1 of the original batch
        resumed = self.generate(
            model, first.sequences[index], full_mask[index], 40, 12, **given_cache(moved), **options
        )
        stayed = self.generate(
            model, first.sequences, full_mask, 40, 12, **given_cache(returned_cache(first)), **options
        )
        self.assertTrue(torch.equal(resumed.sequences, stayed.sequences[index]))
        torch.testing.assert_close(
            torch.stack(resumed.logits, 1), torch.stack(stayed.logits, 1)[index], atol=ATOL, rtol=0
        )


class HugeLimitValidationTest(unittest.TestCase):
    """Limits beyond `MAX_CACHE_LIMIT` would overflow int64 column arithmetic: refused before any token."""

    @parameterized.expand([(MAX_CACHE_LIMIT + 1,), (2**63,), (10**23,)])
    def test_limit_above_the_maximum_is_refused(self, limit):
        model = build_tiny_model("llama")
        calls = []
        handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
        try:
            with self.assertRaisesRegex(ValueError, rf"cache_limit.*\[1, {MAX_CACHE_LIMIT}\].*got {limit}"):
                model.generate(torch.ones(1, 4, dtype=torch.long), max_new_tokens=3, cache_limit=limit)
        finally:
            handle.remove()
        self.assertEqual(calls, [])


#: one test class per served family below: CI's older legs run a share of them (tests/conftest.py)
ONE_CLASS_PER_FAMILY = True

for _name in cachelimit.supported_families():
    _class_name = f"{_name.title().replace('_', '')}GrowthTest"
    _rope = FAMILIES[_name].uses_rope
    globals()[_class_name] = type(
        _class_name, (GrowthTesterMixin, unittest.TestCase), {"family": _name, "uses_rope": _rope}
    )


if __name__ == "__main__":
    unittest.main()
