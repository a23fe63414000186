"""Interrupted bounded runs: an exception from a stopping criterion (between steps) or from a forward hook (inside
a forward, after some layers wrote the cache) at the first step, in the middle of a chunked prefill and in the
middle of decoding. Afterwards a normal `generate` on the same model must equal a clean run exactly, and a
continuation from a cache the interrupted run was using must be exact or a clear error, never different tokens.

Oracle: the same run on the same model without the fault (itself tested against the banded reference).
"""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized
from transformers import StoppingCriteria, StoppingCriteriaList

from .common import build_tiny_model, given_cache, left_padded_batch, returned_cache

LIMIT, NEW, CHUNK = 4, 8, 2


class Injected(Exception):
    """The fault."""


class RaiseAtCall(StoppingCriteria):
    """A stopping criterion that raises on its `at`-th call (1 = after the first generated token)."""

    def __init__(self, at: int):
        self.at, self.calls = at, 0

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise Injected(f"stopping criterion, call {self.at}")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def raise_in_layer(model, layer: int, forward: int):
    """A forward pre-hook on decoder layer `layer` that raises in the model's `forward`-th forward (1-based): the
    layers before it have already written this forward's keys and values into the cache."""
    calls = []

    def hook(module, args):
        calls.append(1)
        if len(calls) == forward:
            raise Injected(f"layer {layer}, forward {forward}")

    return model.model.layers[layer].register_forward_pre_hook(hook)


def generate(model, ids, mask, **kwargs):
    kwargs.setdefault("max_new_tokens", NEW)
    out = model.generate(
        ids,
        attention_mask=mask,
        cache_limit=LIMIT,
        num_sink_tokens=1,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        **kwargs,
    )
    return out.sequences, torch.stack(out.logits, 1), returned_cache(out)


FAULTS = [
    # (name, how, prefill chunk size): the forward counts assume prompt rows of 5 and 7 tokens, chunks of 2
    ("first_step_stopping_criterion", ("criterion", 1), None),
    ("first_step_inside_the_prefill", ("layer", 1), None),
    ("mid_prefill_chunk", ("layer", 3), CHUNK),  # forward 3 = the third prompt chunk
    ("mid_decode_stopping_criterion", ("criterion", 4), None),
    ("mid_decode_inside_a_forward", ("layer", 5), None),
    ("mid_decode_after_a_chunked_prefill", ("layer", 6), CHUNK),
]


class FaultInjectionTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama")
        self.ids, self.mask = left_padded_batch([5, 7], seed=3)

    def run_with_fault(self, how, chunk):
        kind, at = how
        options = {} if chunk is None else {"prefill_chunk_size": chunk}
        handle = None
        if kind == "criterion":
            options["stopping_criteria"] = StoppingCriteriaList([RaiseAtCall(at)])
        else:
            handle = raise_in_layer(self.model, layer=1, forward=at)
        try:
            with self.assertRaises(Injected):
                generate(self.model, self.ids, self.mask, **options)
        finally:
            if handle is not None:
                handle.remove()
        return options

    @parameterized.expand(FAULTS)
    def test_next_generate_equals_a_clean_run(self, _, how, chunk):
        options = {} if chunk is None else {"prefill_chunk_size": chunk}
        clean_tokens, clean_logits, _ = generate(self.model, self.ids, self.mask, **options)
        self.run_with_fault(how, chunk)
        tokens, logits, _ = generate(self.model, self.ids, self.mask, **options)
        self.assertTrue(torch.equal(tokens, clean_tokens))
        torch.testing.assert_close(logits, clean_logits, rtol=0, atol=0)

    def continuation_inputs(self, sequences):
        new = torch.ones(sequences.shape[0], sequences.shape[1] - self.ids.shape[1], dtype=self.mask.dtype)
        return sequences, torch.cat([self.mask, new], 1)

    def test_continuation_interrupted_between_steps_is_refused(self):
        """The cache went on by two tokens the caller never received: its inputs are shorter than what it has
        seen, so continuing would be silently wrong; it is refused."""
        sequences, _, cache = generate(self.model, self.ids, self.mask, max_new_tokens=3)
        ids, mask = self.continuation_inputs(sequences)
        criterion = StoppingCriteriaList([RaiseAtCall(2)])
        with self.assertRaises(Injected):
            generate(self.model, ids, mask, **given_cache(cache), stopping_criteria=criterion)
        with self.assertRaisesRegex(ValueError, "past_key_values.*seen"):
            generate(self.model, ids, mask, **given_cache(cache))

    def test_continuation_interrupted_inside_a_forward_is_refused(self):
        sequences, _, cache = generate(self.model, self.ids, self.mask, max_new_tokens=3)
        ids, mask = self.continuation_inputs(sequences)
        handle = raise_in_layer(self.model, layer=1, forward=2)
        try:
            with self.assertRaises(Injected):
                generate(self.model, ids, mask, **given_cache(cache))
        finally:
            handle.remove()
        with self.assertRaisesRegex(ValueError, "interrupted in the middle of a forward"):
            generate(self.model, ids, mask, **given_cache(cache))

    def test_continuation_after_a_clean_turn_is_exact(self):
        """Positive control for the two refusals above: the documented continuation equals one long run."""
        whole, whole_logits, _ = generate(self.model, self.ids, self.mask, max_new_tokens=3 + NEW)
        sequences, _, cache = generate(self.model, self.ids, self.mask, max_new_tokens=3)
        ids, mask = self.continuation_inputs(sequences)
        tokens, logits, _ = generate(self.model, ids, mask, **given_cache(cache))
        self.assertTrue(torch.equal(tokens, whole))
        torch.testing.assert_close(logits, whole_logits[:, 3:], rtol=0, atol=1e-5)
