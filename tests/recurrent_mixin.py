"""Models with recurrent layers (linear attention, SSM, short convolutions: Qwen 3.5, Qwen3-Next, Jamba, Bamba, Zamba 2,
Falcon-H1, Granite 4.0-H, Nemotron-H, LFM2): only the attention layers are bounded. A recurrent layer's cache is
transformers' own layer, holding exactly the state an unbounded run holds, so the whole model runs in constant memory
once the attention window is full. The oracles of every family (`family_mixin`) run on these too: the banded
reference hands the recurrent layers the padding mask, as `generate` does.

Several tokens in a forward after the first (a chunked prefill, new text after a returned cache) are exact only where
the recurrent layers carry their state into it: each family's bounded run there is refused with the reason where
transformers' own run of it differs from its one-forward run (the layers restart their state: Jamba), and equals
transformers' own one-forward run where it does not.
"""

from __future__ import annotations

from functools import partial

import torch
from parameterized import parameterized

from cachelimit import BoundedLayer
from cachelimit.hf import compat
from cachelimit.hf.compat import passed_cache
from tests.common import RESTARTS, VOCAB, left_padded_batch, returned_cache
from tests.family_mixin import ATOL, ATTENTION, NEW, OracleHelpers
from tests.reference import extended_mask
from tests.sink_helpers import SinkHelpers


def state_tensors(layer) -> list[torch.Tensor]:
    """The recurrent states a cache layer holds (transformers' `conv_states` and `recurrent_states`)."""
    states = [*getattr(layer, "conv_states", {}).values(), *getattr(layer, "recurrent_states", {}).values()]
    return [state for state in states if isinstance(state, torch.Tensor)]


def held_bytes(cache) -> int:
    """Every byte a cache holds: its keys and values (`kv_bytes`) and its recurrent states, each storage once."""
    storages = {}
    for layer in cache.layers:
        for tensor in [
            *state_tensors(layer),
            *(getattr(layer, name, None) for name in ("keys", "values", "sink_keys")),
        ]:
            if isinstance(tensor, torch.Tensor):
                storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return sum(storages.values())


#: a weight scale at which a tiny model's recurrent state weighs on its logits: at the configs' 0.02, a restarted
#: Mamba state moves them by ~3e-6, under the tolerance; at 0.1 by ~3e-2 (Jamba, transformers 5.24.0)
WEIGHT_SCALE = {"initializer_range": 0.1}


class RecurrentOracleMixin(OracleHelpers, SinkHelpers):
    def test_recurrent_layers_hold_transformers_own_state(self):
        """The recurrent layers' cache is transformers' own layer class, and its state equals the unbounded run's,
        exactly, even where the bound cuts the attention layers (a recurrent state never sees the bound)."""
        model = self.build(layers=3)
        ids, mask = left_padded_batch([9, 5], seed=1)
        bounded = returned_cache(self.generate(model, ids, mask, 40))
        native = compat.output_cache(self.generate(model, ids, mask, None))
        recurrent = [index for index, layer in enumerate(native.layers) if state_tensors(layer)]
        self.assertTrue(recurrent)
        for index in recurrent:
            theirs, mine = native.layers[index], bounded.layers[index]
            if not isinstance(mine, BoundedLayer):  # a hybrid layer is a bounded layer that also holds the state
                self.assertIs(type(mine), type(theirs))  # transformers' own class, exactly
            for own, other in zip(state_tensors(mine), state_tensors(theirs), strict=True):
                self.assertTrue(torch.equal(own, other), f"layer {index}")

    def test_every_layer_index_answers_the_tokens_seen(self):
        """Asked the length or the mask sizes of any layer, a recurrent one included, the cache answers with its
        bounded layers' (transformers 5.14.0-5.22.0 build the full-attention mask from the first layer that is not
        sliding, which can be a recurrent one; transformers refuses to read a recurrent layer's length)."""
        model = self.build(layers=3)
        ids, mask = left_padded_batch([9, 5], seed=1)
        cache = returned_cache(self.generate(model, ids, mask, 4))
        bounded = [index for index, layer in enumerate(cache.layers) if isinstance(layer, BoundedLayer)]
        others = [index for index, layer in enumerate(cache.layers) if not isinstance(layer, BoundedLayer)]
        if not others:
            self.skipTest("every layer of this model is a bounded one (hybrid layers hold the state)")
        expected = cache.get_seq_length(bounded[0])
        self.assertEqual(expected, ids.shape[1] + NEW - 1)  # columns stored: the last token is not written yet
        for index in others:
            self.assertEqual(cache.get_seq_length(index), expected, f"layer {index}")
            self.assertEqual(cache.get_mask_sizes(1, index), cache.get_mask_sizes(1, bounded[0]), f"layer {index}")

    def test_whole_cache_is_constant_once_the_window_is_full(self):
        """Bytes held (keys, values and recurrent states) after every forward: they stop growing once the attention
        layers' rings are full (L + 1 = 5 slots) and stay the same to the end; an unbounded run's keep growing."""
        model = self.build()
        ids, mask = left_padded_batch([6, 3], seed=2)
        held = {}
        for limit in (4, None):
            seen = held[limit] = []

            def after_forward(module, args, kwargs, output, seen=seen):
                cache = passed_cache(kwargs) or compat.output_cache(output)
                seen.append((cache.get_seq_length(), held_bytes(cache)))

            handle = compat.decoder_body(model).register_forward_hook(after_forward, with_kwargs=True)
            try:
                self.generate(model, ids, mask, limit, max_new_tokens=24)
            finally:
                handle.remove()
        full = [bytes_ for columns, bytes_ in held[4] if columns >= 5]
        self.assertGreater(len(full), 15)
        self.assertEqual(set(full), {full[0]})
        unbounded = [bytes_ for _, bytes_ in held[None]]
        self.assertGreater(unbounded[-1], unbounded[len(unbounded) - len(full)])  # it grew over the same steps

    @parameterized.expand([(attn,) for attn in ATTENTION])
    def test_recurrent_beam_search_not_cutting_equals_transformers(self, attn):
        """Beam search reorders the recurrent states (transformers' own) and the bounded layers together."""
        model = self.build(attn)
        ids, mask = left_padded_batch([7, 4], seed=3)
        options = dict(num_beams=2, num_return_sequences=2, output_scores=True)
        bounded = self.generate(model, ids, mask, 40, **options)
        native = self.generate(model, ids, mask, None, **options)
        self.assertTrue(torch.equal(bounded.sequences, native.sequences))
        torch.testing.assert_close(bounded.sequences_scores, native.sequences_scores, atol=1e-5, rtol=0)

    # ---- several tokens in a forward after the first: a chunked prefill, new text after a returned cache -------------
    def restarts(self, transformers_run, native) -> bool:
        """Whether transformers' own run that reads several tokens in a forward after the first (cache_limit=None)
        differs from its own run in one forward: the model's recurrent layers restart their state there. The answer
        must be clear-cut: equal within the tolerance, or 100 times beyond it."""
        gap = (torch.stack(transformers_run.logits, 1) - torch.stack(native.logits, 1)).abs().max().item()
        self.assertTrue(gap <= ATOL or gap > 100 * ATOL, f"transformers' own runs differ by {gap:.3g}")
        return gap > 100 * ATOL

    def assert_refused_or_equal(self, restarts: bool, run, native):
        """Where transformers restarts the state, the bounded run is refused with the reason before any token; where
        it carries it, the bounded run (a limit that never cuts) equals transformers' own run in one forward."""
        if not compat.at_least(compat.RECURRENT_STATE_CARRIED):
            with self.assertRaisesRegex(ValueError, f"recurrent layers.*{compat.RECURRENT_STATE_CARRIED}"):
                run()
        elif restarts:
            with self.assertRaisesRegex(ValueError, RESTARTS):
                run()
        else:
            self.assert_same_run(run(), native)

    def test_recurrent_chunked_prefill_equals_transformers_or_is_refused(self):
        """A prompt read in chunks of 3: every chunk after the first is a forward of several tokens after the first."""
        model = self.build(**WEIGHT_SCALE)
        ids, mask = left_padded_batch([9, 5], seed=1)
        native = self.generate(model, ids, mask, None)  # transformers' own, the prompt in one forward
        restarts = self.restarts(self.generate(model, ids, mask, None, prefill_chunk_size=3), native)
        self.assert_refused_or_equal(
            restarts, partial(self.generate, model, ids, mask, 40, prefill_chunk_size=3), native
        )
        # chunks of one token after the first never take the multi-token path: served on every model
        self.assert_same_run(self.generate(model, ids, mask, 40, prefill_chunk_size=8), native)  # 9 = 8 + 1

    def test_recurrent_new_text_after_a_cache_equals_transformers_or_is_refused(self):
        """A returned cache continued with 5 new tokens (and the last answer token) in one forward; continued with
        only the token it has not read, it is one long call (every model serves that)."""
        model = self.build(**WEIGHT_SCALE)
        ids, mask = left_padded_batch([8, 5], seed=12)
        first = self.generate(model, ids, mask, 40, max_new_tokens=4)
        own_first = self.generate(model, ids, mask, None, max_new_tokens=4)
        self.assertTrue(torch.equal(first.sequences, own_first.sequences))
        extra = torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(0))
        prompt = torch.cat([first.sequences, extra], 1)
        prompt_mask = extended_mask(mask, prompt)
        native = self.generate(model, prompt, prompt_mask, None)  # transformers' own over the whole text, no cache
        cache = {compat.CACHE_ARGUMENT: compat.output_cache(own_first)}
        restarts = self.restarts(self.generate(model, prompt, prompt_mask, None, **cache), native)
        bounded = {compat.CACHE_ARGUMENT: returned_cache(first)}
        self.assert_refused_or_equal(
            restarts, partial(self.generate, model, prompt, prompt_mask, 40, **bounded), native
        )
        # the one token the cache has not read (the last answer token): one long call, on every model
        fresh = self.generate(model, ids, mask, 40, max_new_tokens=4)
        again = self.generate(model, fresh.sequences, extended_mask(mask, fresh.sequences), 40,
                              **{compat.CACHE_ARGUMENT: returned_cache(fresh)})  # fmt: skip
        whole = self.generate(model, ids, mask, None, max_new_tokens=4 + NEW)
        self.assertTrue(torch.equal(again.sequences, whole.sequences))
        logits = torch.stack(fresh.logits + again.logits, 1)
        torch.testing.assert_close(logits, torch.stack(whole.logits, 1), atol=ATOL, rtol=0)
