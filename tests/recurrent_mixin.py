"""Models with recurrent layers (linear attention, SSM, short convolutions: Qwen 3.5, Qwen3-Next, Jamba, Bamba, Zamba 2,
Falcon-H1, Granite 4.0-H, Nemotron-H, LFM2): only the attention layers are bounded. A recurrent layer's cache is
transformers' own layer, holding exactly the state an unbounded run holds, so the whole model runs in constant memory
once the attention window is full. The oracles of every family (`family_mixin`) run on these too: the banded
reference hands the recurrent layers the padding mask, as `generate` does.
"""

from __future__ import annotations

import torch
from parameterized import parameterized

from cachelimit import BoundedLayer
from cachelimit.hf import compat
from cachelimit.hf.compat import passed_cache
from tests.common import left_padded_batch, returned_cache
from tests.family_mixin import ATTENTION, OracleHelpers
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
