"""Attention-sink tests every supported family must pass (`num_sink_tokens=S` with `cache_limit=L`).

Every bounded run is compared with an independent reference (`tests.sink_reference`): for GPT-2 the banded
full-sequence forward with sink columns, for RoPE models a slow StreamingLLM loop that re-rotates every kept
key to its cache-relative position and lets the model itself compute attention. A subclass sets `family` and
mixes this into a `unittest.TestCase`.
"""

from __future__ import annotations

import torch
from parameterized import parameterized

from cachelimit.hf import compat
from cachelimit.hf.compat import passed_cache
from tests.common import ATTENTION, VOCAB, given_cache, head_dim, kv_heads, left_padded_batch, returned_cache
from tests.sink_helpers import SinkHelpers, full_mask
from tests.sink_reference import StreamingReference, banded_sink_logits

# (num_sinks, limit, prompt length): prompts shorter and longer than L, S up to L - 1, a prompt shorter than S.
GREEDY_CASES = [(0, 4, 7), (1, 3, 2), (1, 4, 9), (2, 5, 1), (2, 5, 5), (2, 5, 6), (2, 6, 14)]
GREEDY_CASES += [(4, 5, 2), (4, 5, 11), (4, 9, 6), (4, 9, 20)]
# (num_sinks, limit, row lengths, prefill_chunk_size): rows whose sinks sit at different columns, rows with
# fewer than S real tokens (their sinks are completed while decoding).
PADDED_CASES = [(4, 6, [7, 2, 11, 5], None), (2, 4, [1, 9, 4], None), (1, 3, [5, 2, 8], None)]
PADDED_CASES += [(4, 6, [7, 2, 11, 5], 3)]
# (num_sinks, limit, prompt length, prefill_chunk_size)
CHUNKED_CASES = [(2, 5, 9, 1), (2, 5, 9, 3), (4, 6, 13, 4), (4, 6, 10, 3), (1, 3, 7, 20), (4, 8, 3, 2)]
BAD_SINKS = [("negative", -1, ValueError), ("equal_to_limit", 5, ValueError), ("above_limit", 9, ValueError)]
BAD_SINKS += [("float", 1.5, TypeError), ("bool", True, TypeError), ("string", "2", TypeError)]
BAD_SINKS += [("tensor", torch.tensor(2), TypeError)]


def cases_with_attention(cases):
    return [(*case, attention) for case in cases for attention in ATTENTION]


class SinkTesterMixin(SinkHelpers):
    """The full attention-sink matrix (run on the representative families)."""

    # ---- greedy decoding vs the reference -------------------------------------------------------------------
    @parameterized.expand(cases_with_attention(GREEDY_CASES))
    def test_sinks_greedy_matches_reference(self, sinks, limit, prompt_length, attn):
        model = self.sink_build(attn)
        ids, mask = left_padded_batch([prompt_length], seed=prompt_length)
        out, logits = self.run_sinks(model, ids, mask, limit, sinks, new=2 * limit + 6)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, limit, sinks)

    def test_sinks_long_run_matches_reference(self):
        """Many ring wraps: the RoPE sink shift grows to ~150 positions."""
        model = self.sink_build()
        ids, mask = left_padded_batch([9], seed=9)
        out, logits = self.run_sinks(model, ids, mask, 6, 2, new=160)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 6, 2)

    def test_sinks_reference_detects_wrong_sinks(self):
        """The comparisons above can fail: forgetting the sinks, or (RoPE) leaving sink keys at their absolute
        positions instead of StreamingLLM's cache-relative ones, moves the logits far beyond the tolerance."""
        model = self.sink_build()
        sinks, limit, prompt_length, new = 2, 5, 9, 20
        ids, mask = left_padded_batch([prompt_length], seed=prompt_length)
        out, logits = self.run_sinks(model, ids, mask, limit, sinks, new)
        wrong = [dict(num_sinks=0)] + ([dict(num_sinks=sinks, cache_relative=False)] if self.uses_rope else [])
        for variant in wrong:
            if self.uses_rope:
                reference = StreamingReference(model, limit, **variant)
                expected = reference.greedy(ids, new)[1][None]
            else:
                sequence_mask = full_mask(mask, out.sequences)
                expected = banded_sink_logits(
                    model, out.sequences, sequence_mask, limit, variant["num_sinks"], [(0, prompt_length)]
                )[:, prompt_length - 1 : -1]
            self.assertGreater((logits - expected).abs().max().item(), 10 * self.sink_atol, variant)

    # ---- left padding: per-row sinks --------------------------------------------------------------------------
    @parameterized.expand(cases_with_attention(PADDED_CASES))
    def test_sinks_left_padded_rows_equal_solo_runs(self, sinks, limit, lengths, chunk, attn):
        model = self.sink_build(attn)
        ids, mask = left_padded_batch(lengths, seed=3)
        width, new = ids.shape[1], 2 * limit + 3
        out, logits = self.run_sinks(model, ids, mask, limit, sinks, new, prefill_chunk_size=chunk)
        for row, length in enumerate(lengths):
            solo, solo_logits = self.run_sinks(
                model, ids[row : row + 1, width - length :], None, limit, sinks, new, prefill_chunk_size=chunk
            )
            self.assertEqual(out.sequences[row, width:].tolist(), solo.sequences[0, length:].tolist(), f"row {row}")
            torch.testing.assert_close(logits[row], solo_logits[0], atol=self.sink_atol, rtol=0, msg=f"row {row}")
        self.assert_sinks_match_reference(
            model, ids, mask, out, logits, limit, sinks, window_prefill=chunk is not None
        )

    # ---- continuation from a returned cache -------------------------------------------------------------------
    # (num_sinks, limit, row lengths, tokens of the first call); (4, 6, [1, 5], 2): row 0 resumes without all sinks
    @parameterized.expand([(2, 5, [6, 3], 6), (4, 6, [2, 9], 6), (1, 3, [4], 6), (4, 6, [1, 5], 2)])
    def test_sinks_continuation_equals_one_call(self, sinks, limit, lengths, first_new):
        model = self.sink_build()
        ids, mask = left_padded_batch(lengths, seed=4)
        second_new = 2 * limit
        whole, whole_logits = self.run_sinks(model, ids, mask, limit, sinks, first_new + second_new)
        first, first_logits = self.run_sinks(model, ids, mask, limit, sinks, first_new)
        resumed_mask = full_mask(mask, first.sequences)
        second, second_logits = self.run_sinks(
            model, first.sequences, resumed_mask, limit, sinks, second_new, **given_cache(returned_cache(first))
        )
        self.assertEqual(second.sequences.tolist(), whole.sequences.tolist())
        torch.testing.assert_close(torch.cat([first_logits, second_logits], 1), whole_logits, atol=1e-5, rtol=0)

    # (num_sinks, limit, prompt length, tokens of the first call, appended tokens, prefill_chunk_size); the last
    # case completes its sinks inside the multi-token forward that resumes from the cache.
    @parameterized.expand(
        [
            (2, 5, 3, 7, 4, None),
            (2, 5, 9, 7, 3, None),
            (4, 6, 4, 7, 5, None),
            (2, 5, 9, 7, 3, 2),
            (4, 6, 1, 2, 5, None),
        ]
    )
    def test_sinks_continuation_with_new_tokens_matches_reference(
        self, sinks, limit, prompt_length, first_new, appended, chunk
    ):
        """Tokens appended to a returned sequence are read in one multi-token forward from the kept cache (RoPE:
        queries at cache-relative positions after the kept keys), or window by window with `prefill_chunk_size`."""
        if chunk is not None and not compat.at_least(compat.CHUNKED_PREFILL_AFTER_A_CACHE):
            self.skipTest("continuing a returned cache with prefill_chunk_size needs transformers >= 5.21.0")
        model = self.sink_build()
        ids, mask = left_padded_batch([prompt_length], seed=5)
        second_new = 9
        first, first_logits = self.run_sinks(model, ids, mask, limit, sinks, first_new)
        extra = torch.randint(1, VOCAB, (1, appended), generator=torch.Generator().manual_seed(appended))
        resumed = torch.cat([first.sequences, extra], 1)
        second, second_logits = self.run_sinks(
            model, resumed, torch.ones_like(resumed), limit, sinks, second_new,
            **given_cache(returned_cache(first)), prefill_chunk_size=chunk,
        )  # fmt: skip
        logits = torch.cat([first_logits, second_logits], 1)[0]
        width = resumed.shape[1]
        generated = torch.cat([first.sequences[0, prompt_length:], second.sequences[0, width:]])
        if self.uses_rope:
            tokens, expected = self.sink_streaming_with_appended(
                model, ids, extra, limit, sinks, first_new, second_new, chunk
            )
            self.assertEqual(generated.tolist(), tokens.tolist())
        else:
            resume_column = prompt_length + first_new - 1  # the last generated token had not been read yet
            spans = [(0, prompt_length)] + ([(resume_column, width)] if chunk is None else [])
            sequences = second.sequences
            reference = banded_sink_logits(model, sequences, torch.ones_like(sequences), limit, sinks, spans)[0]
            expected = torch.cat([reference[prompt_length - 1 : resume_column], reference[width - 1 : -1]])
            self.assertEqual(expected.argmax(-1).tolist(), generated.tolist())
        torch.testing.assert_close(logits, expected, atol=self.sink_atol, rtol=0)

    @staticmethod
    def sink_streaming_with_appended(model, ids, extra, limit, sinks, first_new, second_new, chunk):
        """StreamingLLM: greedy, then the last token + `extra` at once (or one by one), then greedy again."""
        reference = StreamingReference(model, limit, sinks)
        first_tokens, first_logits = reference.greedy(ids, first_new)
        appended = torch.cat([first_tokens[-1:][None], extra], 1)
        if chunk is None:
            last = reference.feed(appended)[-1]
        else:
            last = [reference.feed(appended[:, i : i + 1]) for i in range(appended.shape[1])][-1][-1]
        second_tokens, second_logits = reference.continue_greedy(last, second_new)
        return torch.cat([first_tokens, second_tokens]), torch.cat([first_logits, second_logits])

    # ---- chunked (windowed) prefill -----------------------------------------------------------------------------
    @parameterized.expand(cases_with_attention(CHUNKED_CASES))
    def test_sinks_chunked_prefill_matches_reference(self, sinks, limit, prompt_length, chunk, attn):
        model = self.sink_build(attn)
        ids, mask = left_padded_batch([prompt_length], seed=6)
        out, logits = self.run_sinks(model, ids, mask, limit, sinks, 2 * limit + 2, prefill_chunk_size=chunk)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, limit, sinks, window_prefill=True)

    # ---- the cache never holds more than L positions ------------------------------------------------------------
    @parameterized.expand([(2, 5, [3, 9], None), (4, 6, [2, 11], 3), (1, 3, [6], None)])
    def test_sinks_kept_lengths_never_exceed_limit(self, sinks, limit, lengths, chunk):
        model = self.sink_build()
        ids, mask = left_padded_batch(lengths, seed=7)
        new = 2 * limit + 3
        kept, expected = [], []

        def after_forward(module, args, kwargs, output):
            cache = passed_cache(kwargs)
            columns = cache.get_seq_length()
            real_seen = torch.cat([mask, mask.new_ones(len(lengths), new)], 1)[:, :columns].sum(1)
            kept.append(cache.kept_lengths().tolist())
            expected.append(real_seen.clamp(max=limit).tolist())

        # the base model: transformers 4.x runs prefill chunks through `forward`, past the top module's hooks
        handle = compat.decoder_body(model).register_forward_hook(after_forward, with_kwargs=True)
        try:
            out, _ = self.run_sinks(model, ids, mask, limit, sinks, new, prefill_chunk_size=chunk)
        finally:
            handle.remove()
        prefill_forwards = 1 if chunk is None else -(-ids.shape[1] // chunk)
        if chunk is not None and compat.CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN:  # 4.x: the last token is a decode
            prefill_forwards = -(-(ids.shape[1] - 1) // chunk) + 1
        self.assertEqual(len(kept), prefill_forwards + new - 1)
        self.assertEqual(kept, expected)
        self.assertLessEqual(max(max(step) for step in kept), limit)
        config = model.config
        slots_per_layer = 2 * (limit + 1) + (sinks if self.uses_rope else 0)  # keys+values, plus un-rotated sinks
        per_layer = len(lengths) * kv_heads(config) * head_dim(config) * slots_per_layer * 4  # float32
        self.assertEqual(returned_cache(out).kv_bytes(), config.num_hidden_layers * per_layer)

    # ---- bad input: rejected before any token --------------------------------------------------------------------
    def assert_sinks_rejected_before_any_token(self, model, error, pattern, **kwargs):
        calls = []
        handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
        try:
            with self.assertRaisesRegex(error, pattern):
                model.generate(torch.ones(1, 4, dtype=torch.long), max_new_tokens=3, do_sample=False, **kwargs)
        finally:
            handle.remove()
        self.assertEqual(calls, [])

    @parameterized.expand(BAD_SINKS)
    def test_sinks_bad_num_sink_tokens(self, _, value, error):
        allowed = r"\[0, 4\]" if error is ValueError else "int"
        self.assert_sinks_rejected_before_any_token(
            self.sink_build(), error, rf"num_sink_tokens.*{allowed}", cache_limit=5, num_sink_tokens=value
        )

    def test_sinks_without_cache_limit_rejected(self):
        self.assert_sinks_rejected_before_any_token(
            self.sink_build(), ValueError, "num_sink_tokens.*cache_limit", num_sink_tokens=2
        )


class NativeWindowSinkTesterMixin(SinkTesterMixin):
    """Sinks under a model's own sliding window (Mistral): the effective limit is min(L, W - 1)."""

    @parameterized.expand([(6, 10, 2, 9, None), (6, 10, 2, 9, 3), (5, 8, 1, 12, None), (6, 5, 3, 4, None)])
    def test_sinks_native_window_matches_reference(self, window, limit, sinks, prompt_length, chunk):
        model = self.sink_build(sliding_window=window)
        ids, mask = left_padded_batch([prompt_length], seed=8)
        out, logits = self.run_sinks(model, ids, mask, limit, sinks, 16, prefill_chunk_size=chunk)
        effective = min(limit, window - 1)
        self.assert_sinks_match_reference(
            model, ids, mask, out, logits, effective, sinks, window_prefill=chunk is not None
        )

    def test_sinks_at_native_window_rejected(self):
        model = self.sink_build(sliding_window=6)
        self.assert_sinks_rejected_before_any_token(
            model, ValueError, r"num_sink_tokens.*\[0, 4\]", cache_limit=10, num_sink_tokens=5
        )
