"""The tests every supported family must pass, written once (like transformers' model-tester mixins).

Every check compares a bounded run with an independent reference (`tests.reference`): the banded
full-sequence forward, or transformers' own unbounded / unpatched generation where they must agree.
A subclass sets `family` (the rest comes from its declaration) and mixes this into a `unittest.TestCase`.
"""

from __future__ import annotations

import torch
from parameterized import parameterized
from transformers import GenerationConfig
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

import cachelimit
from cachelimit import BoundedCache
from cachelimit.hf import compat
from cachelimit.hf.compat import REPETITION_PENALTY_SKIPS_LEFT_PADDING, passed_cache
from tests.bounded_helpers import ATOL, BF16_ATOL, NEW, BoundedHelpers
from tests.common import ATTENTION, PAD, VOCAB, given_cache, head_dim, kv_heads, left_padded_batch, returned_cache
from tests.growth_spec import ring_capacities, widths_between
from tests.reference import extended_mask, generated_step_logits


class BoundedGenerationTesterMixin(BoundedHelpers):
    # ---- exactness against the banded reference ---------------------------------------------------------------
    @parameterized.expand(
        [
            (attn, dtype, limit, lengths, layers)
            for attn in ATTENTION
            for dtype in ("float32", "bfloat16")
            for limit, lengths, layers in [
                (1, [4, 7], 2),  # prompts longer than L
                (3, [2, 9], 2),  # one row shorter, one longer
                (5, [5], 3),  # prompt exactly L, three layers
                (6, [3, 4], 2),  # prompts shorter than L, generation crosses it
                (40, [6, 11], 2),  # L larger than the whole sequence
            ]
        ]
    )
    def test_greedy_matches_reference(self, attn, dtype, limit, lengths, layers):
        model = self.build(attn, getattr(torch, dtype), layers=layers)
        ids, mask = left_padded_batch(lengths, seed=limit)
        output = self.bounded(model, ids, mask, limit, output_scores=True)
        self.assert_matches_reference(model, output, mask, limit, atol=ATOL if dtype == "float32" else BF16_ATOL)
        torch.testing.assert_close(output.scores, output.logits, atol=0, rtol=0)  # greedy: no processor
        self.assertTrue(torch.equal(output.sequences[:, ids.shape[1] :], torch.stack(output.logits, 1).argmax(-1)))
        if limit >= output.sequences.shape[1] and dtype == "float32":
            # the window never cuts: an unbounded run reads the same keys (bf16 near-ties may flip argmax
            # between two differently rounded, equally valid computations, so this is float32 only)
            unbounded = self.bounded(model, ids, mask, None)
            self.assertTrue(torch.equal(output.sequences, unbounded.sequences))
            torch.testing.assert_close(
                torch.stack(output.logits, 1), torch.stack(unbounded.logits, 1), atol=ATOL, rtol=0
            )

    @parameterized.expand([("eager", "float32"), ("sdpa", "float32"), ("eager", "bfloat16"), ("sdpa", "bfloat16")])
    def test_reference_tells_neighbouring_limits_apart(self, attn, dtype):
        """The comparison can fail: a window one position off changes the logits by far more than the
        tolerance, float32 (1e-5) and bf16 alike (bf16 only promises bf16 rounding: kernels and shapes differ
        between one full forward and step-by-step decoding)."""
        model = self.build(attn, getattr(torch, dtype))
        atol = ATOL if dtype == "float32" else BF16_ATOL
        ids, mask = left_padded_batch([3, 10], seed=2)
        output = self.bounded(model, ids, mask, 4)
        self.assertEqual(returned_cache(output).layers[0].keys.dtype, model.dtype)
        self.assert_matches_reference(model, output, mask, 4, atol=atol)
        for wrong in (3, 5):
            gap = (torch.stack(output.logits, 1) - generated_step_logits(model, output.sequences, mask, wrong)).abs()
            self.assertGreater(gap.max().item(), 2 * BF16_ATOL, f"limit {wrong} is indistinguishable from 4")

    def test_sampling_is_reproducible_and_draws_from_reference(self):
        model = self.build()
        ids, mask = left_padded_batch([4, 8], seed=3)
        torch.manual_seed(11)
        output = self.bounded(model, ids, mask, 3, do_sample=True, top_k=0, top_p=1.0, temperature=1.0)
        torch.manual_seed(11)
        again = self.bounded(model, ids, mask, 3, do_sample=True, top_k=0, top_p=1.0, temperature=1.0)
        self.assertTrue(torch.equal(output.sequences, again.sequences))
        expected = self.assert_matches_reference(model, output, mask, 3)
        torch.manual_seed(11)  # the same draws, taken from the reference distribution step by step
        drawn = [torch.multinomial(expected[:, step].softmax(-1), 1)[:, 0] for step in range(NEW)]
        self.assertTrue(torch.equal(output.sequences[:, ids.shape[1] :], torch.stack(drawn, 1)))

    def test_num_return_sequences_with_sampling(self):
        model = self.build()
        ids, mask = left_padded_batch([5, 9], seed=4)
        torch.manual_seed(5)
        output = self.bounded(model, ids, mask, 2, do_sample=True, num_return_sequences=3)
        self.assertEqual(output.sequences.shape[0], 6)
        self.assertTrue(torch.equal(output.sequences[:, : ids.shape[1]], ids.repeat_interleave(3, 0)))
        for first in (0, 3):  # three different samples of each prompt
            self.assertEqual(len({tuple(row.tolist()) for row in output.sequences[first : first + 3]}), 3)
        self.assert_matches_reference(model, output, mask.repeat_interleave(3, 0), 2)
        self.assertLessEqual(int(returned_cache(output).kept_lengths().max()), 2)

    def test_beam_search_every_returned_beam_matches_reference(self):
        model = self.build()
        ids, mask = left_padded_batch([4, 9], seed=5)
        output = self.bounded(model, ids, mask, 3, num_beams=3, num_return_sequences=3, output_scores=True)
        rows = mask.repeat_interleave(3, 0)
        expected = generated_step_logits(model, output.sequences, rows, 3)
        logits = torch.stack(output.logits, 1)  # [batch * beams, steps, V] in running-beam order
        steps = torch.arange(NEW)
        torch.testing.assert_close(logits[output.beam_indices, steps], expected, atol=ATOL, rtol=0)
        chosen = expected.log_softmax(-1).gather(-1, output.sequences[:, ids.shape[1] :, None])[..., 0]
        torch.testing.assert_close(output.sequences_scores, chosen.sum(1) / NEW, atol=ATOL, rtol=0)

    def test_left_padded_rows_equal_their_solo_runs(self):
        model = self.build("eager")
        lengths = [3, 11, 7]
        ids, mask = left_padded_batch(lengths, seed=6)
        batch = self.bounded(model, ids, mask, 4)
        for row, length in enumerate(lengths):
            solo_ids = ids[row : row + 1, ids.shape[1] - length :]
            solo = self.bounded(model, solo_ids, torch.ones_like(solo_ids), 4)
            self.assertTrue(torch.equal(batch.sequences[row, ids.shape[1] - length :], solo.sequences[0]))
            got = torch.stack(batch.logits, 1)[row]
            torch.testing.assert_close(got, torch.stack(solo.logits, 1)[0], atol=ATOL, rtol=0)

    def test_output_scores_are_processed_reference_logits(self):
        model = self.build()
        ids, mask = left_padded_batch([6, 3], seed=7)
        output = self.bounded(model, ids, mask, 3, output_scores=True, repetition_penalty=1.5)
        expected = self.assert_matches_reference(model, output, mask, 3)
        # transformers >= 5.23 ignores each row's left pads when penalising repeated tokens (earlier: pads count)
        pads = ids.shape[1] - mask.sum(1) if REPETITION_PENALTY_SKIPS_LEFT_PADDING else None
        penalty = RepetitionPenaltyLogitsProcessor(1.5, prompt_ignore_length=pads)
        prompt = ids.shape[1]
        for step, scores in enumerate(output.scores):
            seen = output.sequences[:, : prompt + step]
            torch.testing.assert_close(scores, penalty(seen, expected[:, step].clone()), atol=ATOL, rtol=0)
        self.assertTrue(torch.equal(output.sequences[:, prompt:], torch.stack(output.scores, 1).argmax(-1)))

    def test_row_finishing_early_on_eos(self):
        """A finished row is padded by `generate` but keeps being decoded: it must stay exact too."""
        model = self.build()
        ids, mask = left_padded_batch([5, 9], seed=14)
        free = self.bounded(model, ids, mask, 3)
        eos = int(free.sequences[0, ids.shape[1] + 2])  # the token row 0 emits at step 3
        model.generation_config.eos_token_id = eos
        output = self.bounded(model, ids, mask, 3)
        finished = (output.sequences[:, ids.shape[1] :] == eos).cumsum(1) > 0
        self.assertTrue(finished[0, 2:].all())
        self.assertGreater(output.sequences.shape[1], ids.shape[1] + 3, "nothing decoded after row 0 finished")
        self.assertTrue((output.sequences[0, ids.shape[1] + 3 :] == PAD).all())
        self.assert_matches_reference(model, output, mask, 3)

    @parameterized.expand([("no_attention_mask",), ("inputs_embeds",), ("max_length",), ("generation_config",)])
    def test_other_ways_to_call_generate(self, way):
        model = self.build()
        ids, mask = left_padded_batch([9] if way == "no_attention_mask" else [1, 9], seed=15)
        config = GenerationConfig(max_new_tokens=NEW, do_sample=False, pad_token_id=PAD)
        embeds = model.get_input_embeddings()(ids)
        call = {
            "no_attention_mask": dict(input_ids=ids, max_new_tokens=NEW),
            "inputs_embeds": dict(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=NEW),
            "max_length": dict(input_ids=ids, attention_mask=mask, max_length=ids.shape[1] + NEW),
            "generation_config": dict(input_ids=ids, attention_mask=mask, generation_config=config),
        }[way]
        output = model.generate(cache_limit=2, return_dict_in_generate=True, output_logits=True, **call)
        if way == "inputs_embeds":  # `generate` returns only the new tokens
            output.sequences = torch.cat([ids, output.sequences], 1)
        self.assertEqual(output.sequences.shape, (ids.shape[0], ids.shape[1] + NEW))
        self.assert_matches_reference(model, output, mask, 2)

    # ---- the cache itself -------------------------------------------------------------------------------------
    @parameterized.expand([(1, None), (4, None), (30, None), (3, 2), (5, 4)])
    def test_cache_is_bounded_at_every_step(self, limit, chunk):
        model = self.build(layers=3)
        ids, mask = left_padded_batch([12, 5], seed=8)
        seen = []

        def after_forward(module, args, kwargs, output):
            cache = passed_cache(kwargs)
            self.assertIsInstance(cache, BoundedCache)
            columns = cache.get_seq_length()
            real = mask[:, : min(columns, mask.shape[1])].sum(1) + max(0, columns - mask.shape[1])
            self.assertTrue(torch.equal(cache.kept_lengths(), real.clamp(max=limit)), f"after {columns} columns")
            self.assertEqual([layer.get_seq_length() for layer in cache.layers], [columns] * 3)
            seen.append(columns)

        # the base model: transformers 4.x runs prefill chunks through `forward`, past the top module's hooks
        handle = compat.decoder_body(model).register_forward_hook(after_forward, with_kwargs=True)
        try:
            with self.record_layer_updates() as updates:
                output = self.bounded(model, ids, mask, limit, prefill_chunk_size=chunk)
        finally:
            handle.remove()
        prompt = ids.shape[1]
        chunks = [prompt] if chunk is None else list(range(chunk, prompt, chunk)) + [prompt]
        if chunk is not None and compat.CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN:  # the last token: a decoding step
            chunks = list(range(chunk, prompt - 1, chunk)) + [prompt - 1, prompt]
        self.assertEqual(seen, chunks + list(range(prompt + 1, prompt + NEW)))
        self.assertEqual(len(updates), 3 * len(seen))
        capacity = dict(zip(seen, ring_capacities(widths_between(seen), limit + 1), strict=True))
        for start, new, keys, slots, value_slots in updates:
            self.assertEqual((slots, value_slots), (capacity[start + new],) * 2)  # grown geometrically, up to L + 1
            # decode reads the slots written so far; a multi-token forward reads the kept past plus its new tokens
            self.assertEqual(keys, min(start + 1, limit + 1) if new == 1 else min(start, limit) + new)
            if chunk is not None:
                self.assertLessEqual(keys, limit + chunk)
        self.assert_matches_reference(model, output, mask, limit, window_prefill=chunk is not None)

    @parameterized.expand([(2, 1), (3, 4), (4, 3), (1, 5)])
    def test_chunked_prefill_matches_windowed_reference(self, limit, chunk):
        model = self.build("eager")
        ids, mask = left_padded_batch([13, 6], seed=9)
        output = self.bounded(model, ids, mask, limit, prefill_chunk_size=chunk)
        self.assert_matches_reference(model, output, mask, limit, window_prefill=True)

    def test_kv_bytes_counts_exactly_the_bounded_buffers(self):
        model = self.build(layers=3)
        ids, mask = left_padded_batch([9, 4], seed=10)
        for sinks in (0, 2):
            cache = returned_cache(self.bounded(model, ids, mask, 5, num_sink_tokens=sinks or None))
            per_head = kv_heads(model.config) * head_dim(model.config) * 4  # float32
            per_slot = 2 * per_head  # keys + values
            sink_copies = sinks * per_head if self.uses_rope else 0  # un-rotated sink keys
            self.assertEqual(cache.kv_bytes(), 3 * 2 * (6 * per_slot + sink_copies))

    # ---- continuing, and the unbounded path ---------------------------------------------------------------------
    def test_returned_cache_continues_like_one_long_call(self):
        model = self.build()
        ids, mask = left_padded_batch([7, 3], seed=11)
        first = self.bounded(model, ids, mask, 3, max_new_tokens=5)
        cache = returned_cache(first)
        self.assertLessEqual(int(cache.kept_lengths().max()), 3)
        ext = extended_mask(mask, first.sequences)
        second = self.bounded(model, first.sequences, ext, 3, max_new_tokens=6, **given_cache(cache))
        self.assertIs(returned_cache(second), cache)
        whole = self.bounded(model, ids, mask, 3, max_new_tokens=11)
        self.assertTrue(torch.equal(second.sequences, whole.sequences))
        logits = torch.stack(first.logits + second.logits, 1)
        torch.testing.assert_close(logits, torch.stack(whole.logits, 1), atol=ATOL, rtol=0)

    @parameterized.expand([(None, None), (None, 2), (3, None), (3, 1)])
    def test_continuing_with_new_prompt_tokens_matches_reference(self, first_chunk, second_chunk):
        """New user tokens after a bounded run are read with full attention over the kept past, or through
        the window when that call chunks its prefill (each call's own `prefill_chunk_size` decides)."""
        if second_chunk is not None and not compat.at_least(compat.CHUNKED_PREFILL_AFTER_A_CACHE):
            self.skipTest("continuing a returned cache with prefill_chunk_size needs transformers >= 5.21.0")
        model = self.build()
        ids, mask = left_padded_batch([8, 5], seed=12)
        first = self.bounded(model, ids, mask, 3, max_new_tokens=4, prefill_chunk_size=first_chunk)
        extra = torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(0))
        prompt = torch.cat([first.sequences, extra], 1)
        prompt_mask = extended_mask(mask, prompt)
        cache = returned_cache(first)
        second = self.bounded(model, prompt, prompt_mask, 3, **given_cache(cache), prefill_chunk_size=second_chunk)
        spans = [] if first_chunk else [(0, ids.shape[1])]
        spans += [] if second_chunk else [(first.sequences.shape[1] - 1, prompt.shape[1])]
        self.assert_matches_reference(model, second, prompt_mask, 3, full_attention_spans=spans)

    def test_without_cache_limit_matches_the_unpatched_model(self):
        model = self.build()
        ids, mask = left_padded_batch([6, 2], seed=13)
        options = dict(max_new_tokens=NEW, return_dict_in_generate=True, output_scores=True, output_logits=True)
        patched = model.generate(ids, attention_mask=mask, cache_limit=None, **options)
        cachelimit.unpatch(self.family)
        try:
            self.assertFalse(cachelimit.is_patched(self.family))
            original = model.generate(ids, attention_mask=mask, **options)
        finally:
            cachelimit.patch(self.family)
        self.assertTrue(torch.equal(patched.sequences, original.sequences))
        for name in ("scores", "logits"):
            for mine, theirs in zip(getattr(patched, name), getattr(original, name), strict=True):
                self.assertTrue(torch.equal(mine, theirs), name)
        self.assertNotIsInstance(returned_cache(patched), BoundedCache)
