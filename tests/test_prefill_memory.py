"""The limit must never cost more memory than no limit (issue 20, defect 2).

A bounded run's default prefill once built an explicit [B, T, T] visibility and mask for a T-token prompt, where
transformers' own SDPA path needs none (is_causal): 2 GB at 16k tokens, and a 100k-token prompt was killed. The
largest tensor any op allocates during a bounded `generate` must not exceed the largest one of the unbounded run of
the same prompt. Counted exactly, with a dispatch mode that sees every op's outputs (the benchmark
`benchmarks/prefill_memory.py` measures the process's peak RSS from 1k to 32k tokens).
"""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tests.common import build_tiny_model, left_padded_batch, skip_where_sinks_are_refused

PROMPT = 1024


class LargestAllocation(TorchDispatchMode):
    """The bytes of the largest tensor any op returns while active (the cost of a mask, an attention matrix...);
    `min_dims=3` counts only tensors of 3 dimensions or more (masks, attention, activations: not the 2D token ids and
    padding masks that `generate` keeps for the whole sequence)."""

    def __init__(self, min_dims: int = 0):
        super().__init__()
        self.bytes, self.min_dims = 0, min_dims

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.dim() >= self.min_dims and 0 not in tensor.stride():
                self.bytes = max(self.bytes, tensor.numel() * tensor.element_size())  # an expanded view holds nothing
        return out


def largest_allocation(model, ids, mask, min_dims: int = 0, **options) -> int:
    with LargestAllocation(min_dims) as seen, torch.inference_mode():
        model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, **options)
    return seen.bytes


class PrefillMemoryTest(unittest.TestCase):
    @parameterized.expand(
        [
            (family, attn, lengths, limit, sinks)
            for family, attn in [("llama", "sdpa"), ("llama", "eager"), ("gemma3_text", "sdpa")]
            for lengths in ([PROMPT], [PROMPT, PROMPT - 24])  # without and with left padding
            for limit, sinks in [(64, None), (64, 4), (2 * PROMPT, None)]
        ]
    )
    def test_bounded_prefill_allocates_no_more_than_unbounded(self, family, attn, lengths, limit, sinks):
        model = build_tiny_model(family, attn)
        if sinks:
            skip_where_sinks_are_refused(self, model)
        ids, mask = left_padded_batch(lengths, seed=1)
        unbounded = largest_allocation(model, ids, mask)
        bounded = largest_allocation(model, ids, mask, cache_limit=limit, num_sink_tokens=sinks)
        self.assertLessEqual(bounded, unbounded)

    def test_sdpa_prefill_without_pads_builds_no_prompt_sized_mask(self):
        """transformers' own SDPA prefill of an unpadded prompt is causal without a mask; so is a bounded one."""
        model = build_tiny_model("llama", "sdpa")
        ids, mask = left_padded_batch([PROMPT], seed=2)
        self.assertLess(largest_allocation(model, ids, mask, cache_limit=64), PROMPT * PROMPT)

    @parameterized.expand([(64, 4), (64, None)])
    def test_chunked_prefill_mask_is_bounded_by_the_chunk(self, limit, sinks):
        """A windowed (chunked) prefill reads [sinks | kept past | chunk]: its masks are sized by the chunk and the
        limit, however long the prompt (twice the prompt, the same largest allocation), and never larger than the
        unbounded chunked run's (chunk x columns so far)."""
        model = build_tiny_model("llama", "sdpa")
        options = dict(cache_limit=limit, num_sink_tokens=sinks, prefill_chunk_size=32)
        largest = []
        for prompt in (PROMPT, 2 * PROMPT):
            ids, mask = left_padded_batch([prompt, prompt - 24], seed=3)
            largest.append(largest_allocation(model, ids, mask, min_dims=3, **options))
            unbounded = largest_allocation(model, ids, mask, prefill_chunk_size=32)
            self.assertLessEqual(largest[-1], unbounded)
        self.assertEqual(largest[0], largest[1])


if __name__ == "__main__":
    unittest.main()
