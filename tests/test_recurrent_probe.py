"""The refusal of several tokens in a forward after the first follows what a model's recurrent layers do, not its
family: the same family (same config, same weights) whose forward is made to restart its recurrent layers' state on
such a forward is refused, while the model itself is served. The family is the registry's first served recurrent
family that carries its state (a test declaration mixing in `RecurrentOracleMixin`), never named here.
"""

from __future__ import annotations

import functools
import unittest

import torch

from cachelimit.hf import compat
from cachelimit.hf.recurrent_state import restarted_states
from tests.common import RESTARTS, build_tiny_model, left_padded_batch, multi_token_refusal, not_served_here
from tests.declarations import declared_tests
from tests.recurrent_mixin import RecurrentOracleMixin, state_tensors


def carrying_family() -> str | None:
    """The first served recurrent family whose layers carry their state (None: this release serves none)."""
    for name, test in sorted(declared_tests().items()):
        served = issubclass(test, RecurrentOracleMixin) and not_served_here(name) is None
        if served and multi_token_refusal(build_tiny_model(name)) is None:
            return name
    return None


def restarting(model):
    """`model`, its class swapped for a subclass whose forward zeroes every recurrent state it was given before a
    forward of several tokens after the first: what a mixer that restarts its state there computes."""
    base = type(model)

    @functools.wraps(base.forward)  # the same signature: `generate` reads the arguments the forward takes
    def forward(self, *args, **kwargs):
        cache, ids = compat.passed_cache(kwargs), kwargs.get("input_ids")
        if cache is not None and ids is not None and ids.shape[1] > 1 and cache.get_seq_length() > 0:
            for layer in cache.layers:
                for state in state_tensors(layer):
                    state.zero_()
        return base.forward(self, *args, **kwargs)

    model.__class__ = type(f"Restarting{base.__name__}", (base,), {"forward": forward})
    return model


class RecurrentProbeTest(unittest.TestCase):
    def setUp(self):
        if not compat.at_least(compat.RECURRENT_STATE_CARRIED):
            self.skipTest(f"recurrent layers carry their state from transformers {compat.RECURRENT_STATE_CARRIED}")
        self.family = carrying_family()
        if self.family is None:
            self.skipTest("no served recurrent family carries its state here")

    def test_the_same_family_restarting_its_state_is_refused(self):
        ids, mask = left_padded_batch([9, 5], seed=1)
        options = dict(attention_mask=mask, cache_limit=40, max_new_tokens=3, prefill_chunk_size=3)
        model = build_tiny_model(self.family)
        self.assertEqual(restarted_states(model), ())
        model.generate(ids, **options)  # its layers carry their state: served
        changed = restarting(build_tiny_model(self.family))
        self.assertEqual(changed.config.model_type, model.config.model_type)
        self.assertNotEqual(restarted_states(changed), ())
        with self.assertRaisesRegex(ValueError, RESTARTS):
            changed.generate(ids, **options)
        # the prompt in one forward, then one token at a time: no such forward, served on both, the same tokens
        plain = {**options, "prefill_chunk_size": None}
        self.assertTrue(torch.equal(changed.generate(ids, **plain), model.generate(ids, **plain)))
