"""The limit must never cost more time than no limit in an unchunked prefill (issue 28).

A prompt read whole under `cache_limit` is the first forward of its run, nothing cut yet, so cachelimit hands it the
model's own mask (`StepPlan.model_mask`): its attention calls must be the unbounded run's very calls (SDPA's causal
path, no mask: a banded [T, T] mask would cost both memory and, in bfloat16 on CPU, time), and what the limit adds
(the plan, cutting the prompt's keys to the last `L`) must be a fixed number of small ops, however long the prompt.
Counted exactly with a dispatch mode that sees every op; `bench --long --parts prefill` measures the CPU time.
"""

from __future__ import annotations

import collections
import unittest

import torch
from parameterized import parameterized
from torch.utils._python_dispatch import TorchDispatchMode

from tests.common import build_tiny_model, left_padded_batch, skip_where_sinks_are_refused

LIMIT = 64


class OpLog(TorchDispatchMode):
    """Every op dispatched while active: how often each ran, and each attention call's argument shapes and strides
    (and whether it got a mask)."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.attention: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.counts[name] += 1
        if "attention" in name:
            shapes = tuple(  # strides too: SDPA's CPU kernel reads a strided view of the values more slowly
                (tuple(arg.shape), arg.stride()) if isinstance(arg, torch.Tensor) else arg for arg in args
            )
            self.attention.append((name, shapes, sorted((kwargs or {}).items())))
        return func(*args, **(kwargs or {}))


def prefill_ops(model, prompt: int, **options) -> OpLog:
    ids, mask = left_padded_batch([prompt], seed=1)
    with OpLog() as log, torch.inference_mode():
        model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False, **options)
    return log


class UnchunkedPrefillCostTest(unittest.TestCase):
    @parameterized.expand(
        [
            (family, dtype, sinks)
            for family in ("llama", "gemma3_text")
            for dtype in (torch.float32, torch.bfloat16)
            for sinks in (None, 4)
        ]
    )
    def test_same_attention_and_a_fixed_number_of_extra_ops(self, family, dtype, sinks):
        model = build_tiny_model(family, "sdpa", dtype=dtype)
        if sinks:
            skip_where_sinks_are_refused(self, model)
        extra = []
        for prompt in (4 * LIMIT, 8 * LIMIT):
            unbounded = prefill_ops(model, prompt)
            bounded = prefill_ops(model, prompt, cache_limit=LIMIT, num_sink_tokens=sinks)
            self.assertEqual(bounded.attention, unbounded.attention)  # shapes, strides, masks (None), causal flags
            self.assertTrue(all(dict(call[2]).get("is_causal", True) for call in bounded.attention))
            extra.append(sum(bounded.counts.values()) - sum(unbounded.counts.values()))
        self.assertEqual(extra[0], extra[1])  # what the limit adds does not grow with the prompt


if __name__ == "__main__":
    unittest.main()
