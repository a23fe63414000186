"""The oracles every family is checked against (its test declaration mixes these into a `unittest.TestCase`).

`FamilyOracleMixin` runs on every family: the banded full-sequence reference (greedy, left padding, a limit that
cuts and one that does not, where the run must also equal transformers' own unbounded run; a chunked prefill),
the attention-sink reference of its kind (StreamingLLM for RoPE, banded with sink columns for learned
positions), the bound on the cache and its bytes, and the untouched unbounded path. `NativeWindowOracleMixin`
adds transformers' own sliding window as a second oracle for a family that has one. The heavy matrix (beams,
sampling, bf16, continuation, scores, ...) lives in `bounded_mixin`/`sink_mixin` and runs on a representative
subset of families, each declaring so.
"""

from __future__ import annotations

import re
from functools import partial

import torch
from parameterized import parameterized

import cachelimit
from cachelimit import BoundedCache
from cachelimit.hf import compat
from tests.common import (
    ATTENTION,
    FamilyTestBase,
    build_tiny_model,
    expected_bytes,
    given_cache,
    left_padded_batch,
    refused_as_restarting,
    returned_cache,
)
from tests.reference import generated_step_logits, native_sliding_window_model
from tests.sink_helpers import SinkHelpers

ATOL = 1e-5
NEW = 8


class OracleHelpers(FamilyTestBase):
    def build(self, attn: str | None = None, layers: int = 2, **overrides):
        attn = attn or self.attentions[-1]
        self.require_attention(attn)
        return build_tiny_model(self.family, attn, layers=layers, **overrides)

    def generate(self, model, ids, mask, limit, **kwargs):
        options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
        return model.generate(ids, attention_mask=mask, cache_limit=limit, **{**options, **kwargs})

    def assert_reference(self, model, output, mask, limit, **reference_kw) -> torch.Tensor:
        expected = generated_step_logits(model, output.sequences, mask, limit, **reference_kw)
        torch.testing.assert_close(torch.stack(output.logits, 1), expected, atol=ATOL, rtol=0)
        prompt = mask.shape[1]
        self.assertTrue(torch.equal(output.sequences[:, prompt:], expected.argmax(-1)))
        return expected

    def assert_same_run(self, bounded, native):
        self.assertTrue(torch.equal(bounded.sequences, native.sequences))
        torch.testing.assert_close(torch.stack(bounded.logits, 1), torch.stack(native.logits, 1), atol=ATOL, rtol=0)


class FamilyOracleMixin(OracleHelpers, SinkHelpers):
    @parameterized.expand([(attn, limit) for attn in ATTENTION for limit in (3, 40)])
    def test_oracle_greedy_matches_banded_reference(self, attn, limit):
        """Left-padded rows, one prompt longer than L; L = 40 never cuts: then the run must also equal
        transformers' own unbounded run, token for token."""
        model = self.build(attn)
        ids, mask = left_padded_batch([2, 9], seed=limit)
        output = self.generate(model, ids, mask, limit)
        self.assert_reference(model, output, mask, limit)
        if limit >= output.sequences.shape[1]:
            self.assert_same_run(output, self.generate(model, ids, mask, None))
        else:  # the comparison can fail: a window one position off is far outside the tolerance
            for wrong in (limit - 1, limit + 1):
                other = generated_step_logits(model, output.sequences, mask, wrong)
                self.assertGreater((torch.stack(output.logits, 1) - other).abs().max().item(), 100 * ATOL)

    def test_oracle_chunked_prefill_matches_windowed_reference(self):
        model = self.build()
        ids, mask = left_padded_batch([11, 6], seed=9)
        if refused_as_restarting(self, model, partial(self.generate, model, ids, mask, 3, prefill_chunk_size=2)):
            return
        output = self.generate(model, ids, mask, 3, prefill_chunk_size=2)
        self.assert_reference(model, output, mask, 3, window_prefill=True)

    def test_oracle_cache_holds_at_most_limit(self):
        model = self.build(layers=3)
        ids, mask = left_padded_batch([9, 4], seed=10)
        # 4.x Gemma 3, ModernBERT decoder, JetMoE: sinks refused (test_bad_input checks it); so are they where the
        # family refuses them
        refused = compat.rotaries_apart(model) is not None
        refused = refused or bool(self.sink_refusal)
        for sinks in (0,) if refused else (0, 2):
            cache = returned_cache(self.generate(model, ids, mask, 5, num_sink_tokens=sinks or None))
            self.assertIsInstance(cache, BoundedCache)
            self.assertTrue(torch.equal(cache.kept_lengths(), torch.tensor([5, 5])))
            # 2 rows, L + 1 = 6 slots per bounded layer (S sinks and a ring of L - S + 1); RoPE layers also keep their
            # sink keys un-rotated, layers without positions (NoPE) do not (`kv_layout` reads which, from the model)
            self.assertEqual(cache.kv_bytes(), expected_bytes(model, 2, sinks, 6 - sinks))

    @parameterized.expand([("prefill", None), ("chunked", 3)])
    def test_oracle_sinks_match_reference(self, _, chunk):
        model = self.sink_build()
        if self.sink_refusal:  # refused before any forward, with the family's reason
            self.assert_sinks_refused(model)
            return
        ids, mask = left_padded_batch([9, 3], seed=4)
        run = partial(self.run_sinks, model, ids, mask, 5, 2, 14, prefill_chunk_size=chunk)
        if chunk is not None and refused_as_restarting(self, model, run):
            return
        out, logits = run()
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 5, 2, window_prefill=chunk is not None)

    def test_oracle_bounded_cache_from_model_equals_generates_own(self):
        """`BoundedCache.from_model` finds the same rotary (and window) as the family declaration."""
        model = self.sink_build()
        if self.sink_refusal:
            with self.assertRaisesRegex(ValueError, re.escape(self.sink_refusal)):
                BoundedCache.from_model(model, 4, 2)
            return
        ids, mask = left_padded_batch([9, 3], seed=5)
        own, own_logits = self.run_sinks(model, ids, mask, 4, 2, 10)
        cache = BoundedCache.from_model(model, 4, 2)
        built, built_logits = self.run_sinks(model, ids, mask, 4, 2, 10, **given_cache(cache))
        self.assertIs(returned_cache(built), cache)
        self.assertEqual(cache.rotates_sinks, returned_cache(own).rotates_sinks)
        self.assertEqual(cache.rotates_sinks, self.uses_rope)
        self.assertTrue(torch.equal(built.sequences, own.sequences))
        torch.testing.assert_close(built_logits, own_logits, atol=0, rtol=0)
        # a fresh hand-built cache is fitted to the model by generate: its layer types, windows and rotaries, hybrid
        # models (sliding and full layers, NoPE layers) included
        bare_cache = BoundedCache(4, 2)
        bare, bare_logits = self.run_sinks(model, ids, mask, 4, 2, 10, **given_cache(bare_cache))
        self.assertEqual(bare_cache.rotates_sinks, self.uses_rope)
        self.assertEqual(len(bare_cache.groups), len(returned_cache(own).groups))
        torch.testing.assert_close(bare_logits, own_logits, atol=0, rtol=0)

    def test_oracle_without_cache_limit_matches_the_unpatched_model(self):
        model = self.build()
        ids, mask = left_padded_batch([6, 2], seed=13)
        options = dict(max_new_tokens=NEW, return_dict_in_generate=True, output_logits=True)
        patched = model.generate(ids, attention_mask=mask, cache_limit=None, **options)
        cachelimit.unpatch(self.family)
        try:
            original = model.generate(ids, attention_mask=mask, **options)
        finally:
            cachelimit.patch(self.family)
        self.assertTrue(torch.equal(patched.sequences, original.sequences))
        for mine, theirs in zip(patched.logits, original.logits, strict=True):
            self.assertTrue(torch.equal(mine, theirs))


class NativeWindowOracleMixin(OracleHelpers):
    """transformers' own sliding window as a second oracle. `native_window_switches`: the config overrides
    (besides `sliding_window`) that give every layer of this family the native window."""

    native_window_switches: dict = {}

    def native(self, model, ids, mask, **kwargs):
        """transformers' own run (`cache_limit=None`: nothing of cachelimit's is used)."""
        options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
        return model.generate(ids, attention_mask=mask, cache_limit=None, **{**options, **kwargs})

    @parameterized.expand([(attn,) for attn in ATTENTION])
    def test_native_chunked_prefill_equals_native_sliding_window(self, attn):
        # every layer slides (a window too wide to matter), so the copy below differs in the window only (Gemma 3
        # gives sliding layers their own rotary base)
        model = self.build(attn, sliding_window=512, **self.native_window_switches)
        ids, mask = left_padded_batch([13, 8], seed=3)  # prompts longer than the window L + 1
        bounded = self.generate(model, ids, mask, 3, prefill_chunk_size=2)
        oracle = native_sliding_window_model(model, 4, **self.native_window_switches)
        self.assert_same_run(bounded, self.native(oracle, ids, mask))

    def test_native_window_smaller_than_cache_limit_wins(self):
        model = self.build(sliding_window=4, **self.native_window_switches)  # at most 3 past keys per query
        ids, mask = left_padded_batch([12, 7], seed=5)
        bounded = self.generate(model, ids, mask, 10)
        self.assertTrue(torch.equal(returned_cache(bounded).kept_lengths(), torch.tensor([3, 3])))
        self.assert_same_run(bounded, self.native(model, ids, mask))  # the model's own window, unpatched path
        self.assert_reference(model, bounded, mask, 3)
