"""A steady decode step of a bounded run waits for the device no more often than transformers' own step (issue 18).

On a GPU every host-device sync (an op whose result the host reads: `bool(t)`, `t.item()`, `int(t)`, `nonzero`)
stalls the CPU until every queued kernel has run, so the loop can no longer queue the next step's kernels while the
device computes. transformers' own loop makes one per step outside the forward on 5.x (its stopping check,
`unfinished_sequences.max() == 0`; two on 4.57.6), and its own mask may add one inside (5.x: `fast_all` of a left-padded mask; 4.x:
SDPA's check of the padding, even without pads); a bounded step must add none to the loop's own (it builds its mask
without one, so it may sync less than the unbounded step). Counted exactly, with a dispatch mode that sees every aten op, over 100 steady steps (each between two
forwards: the plan, the mask, the forward, the sampling), in the same test as the unbounded run of the same model
and prompt. The per-step op overhead is measured in `benchmarks/step_overhead.py`.
"""

from __future__ import annotations

import collections
import unittest
from unittest import mock

import torch
from parameterized import parameterized

from cachelimit import BoundedCache
from cachelimit.bench.op_count import OpCounter, syncs
from cachelimit.core.scored_layer import ScoredLayer
from tests.common import build_tiny_model, left_padded_batch

STEPS, WARM_UP, LIMIT = 100, 24, 8


def ops_per_step(model, ids, mask, **options) -> tuple[list[collections.Counter], list[collections.Counter]]:
    """The ops of each step of a greedy `generate`, from one forward to the next (plan, mask, forward, sampling), and
    of the model's forward alone in each of those steps."""
    counter, starts, ends = OpCounter(), [], []
    before = model.register_forward_pre_hook(lambda *_: starts.append(counter.ops.copy()))
    after = model.register_forward_hook(lambda *_: ends.append(counter.ops.copy()))
    try:
        with counter, torch.inference_mode():
            model.generate(ids, attention_mask=mask, max_new_tokens=WARM_UP + STEPS + 1, do_sample=False, **options)
    finally:
        before.remove()
        after.remove()
    steps = [end - start for start, end in zip(starts, starts[1:], strict=False)]
    return steps, [end - start for start, end in zip(starts, ends, strict=True)][: len(steps)]


def unbounded_syncs(model, ids, mask) -> tuple[list[int], set[int]]:
    """The syncs of each steady step of transformers' own run, and those its loop makes outside the model's forward
    (its stopping check): the mask transformers builds inside the forward may add one (`fast_all` of a padded batch
    on 5.x, an SDPA check of the padding on 4.x) where a bounded step builds its own mask without any."""
    steps, forwards = ops_per_step(model, ids, mask)
    loop = {syncs(step) - syncs(forward) for step, forward in zip(steps[-STEPS:], forwards[-STEPS:], strict=True)}
    return [syncs(step) for step in steps[-STEPS:]], loop


class HostSyncTest(unittest.TestCase):
    @parameterized.expand(
        [
            ("window", "mistral", [10, 10], {}),
            ("sinks", "llama", [10, 10], {"num_sink_tokens": 4}),
            ("left_padded", "llama", [10, 6], {}),
            ("left_padded_sinks", "llama", [10, 3], {"num_sink_tokens": 2}),  # a row completes its sinks decoding
            ("chunked_prefill", "mistral", [10, 10], {"prefill_chunk_size": 4}),
            ("hybrid", "gemma3_text", [10, 7], {}),  # sliding and full layers: two groups, two masks
            ("learned_positions_sinks", "gpt2", [10, 10], {"num_sink_tokens": 2}),
            # scored policies (issue 25): each head frees its own slot, all on the device
            ("keydiff", "llama", [10, 10], {"cache_policy": "keydiff"}),
            ("keydiff_left_padded_sinks", "llama", [10, 3], {"cache_policy": "keydiff", "num_sink_tokens": 2}),
            ("tova_left_padded", "llama", [10, 6], {"cache_policy": "tova"}),
            ("snapkv_sinks", "llama", [10, 10], {"cache_policy": "snapkv", "num_sink_tokens": 2}),
        ]
    )
    def test_steady_steps_sync_no_more_than_unbounded(self, _, family, lengths, options):
        attention = "eager" if family == "gemma3_text" else "sdpa"
        model = build_tiny_model(family, attention, layers=2)
        ids, mask = left_padded_batch(lengths, seed=5)
        unbounded, loop = unbounded_syncs(model, ids, mask)
        bounded = [syncs(step) for step in ops_per_step(model, ids, mask, cache_limit=LIMIT, **options)[0][-STEPS:]]
        self.assertEqual(len(bounded), STEPS)
        self.assertEqual(len(loop), 1, "transformers' own steps differ from each other")
        self.assertEqual(bounded, [loop.pop()] * STEPS)  # exactly the loop's own: the bound adds none
        self.assertTrue(all(b <= u for b, u in zip(bounded, unbounded, strict=True)), (bounded[0], unbounded[0]))

    def test_the_count_sees_a_sync_the_plan_would_add(self):
        """The negative control: a plan that reads whether the new tokens are pads (as every step did before issue
        18) is one sync more per step, and the count shows it."""
        model = build_tiny_model("mistral", layers=2)
        ids, mask = left_padded_batch([10, 10], seed=5)
        (loop,) = unbounded_syncs(model, ids, mask)[1]
        with mock.patch.object(BoundedCache, "is_generated", return_value=False):  # every step reads its mask
            bounded = syncs(ops_per_step(model, ids, mask, cache_limit=LIMIT)[0][-1])
        self.assertEqual(bounded, loop + 1)


class SteadyScoredWritesTest(unittest.TestCase):
    @parameterized.expand([("keydiff", 4), ("tova", 3), ("snapkv", 3)])
    def test_a_steady_scored_step_writes_no_slot_flags(self, policy, writes):
        """The other cost of a host-bound step is its op count (docs/gpu.md: the dispatches, not the syncs). A
        steady scored step writes its token where a real, unpinned one was evicted, so per layer it writes the key,
        the value and the column (KeyDiff: and the key's inverse norm), not the realness and sink flags as well. A
        left-padded batch with sinks gets there once its last pad's slot is freed and flagged (`FREED`); that the
        kept keys are then the policy's own is the reference tests' part (`tests/test_scored_policy.py`)."""
        model = build_tiny_model("llama", layers=2)
        ids, mask = left_padded_batch([10, 3], seed=5)
        decode, steady = ScoredLayer._decode, []

        def counted(layer, plan, *args):
            with OpCounter() as counter:
                result = decode(layer, plan, *args)
            if plan.steady:
                steady.append(counter.ops["aten.index_copy_"] + counter.ops["aten.index_fill_"])
            return result

        with mock.patch.object(ScoredLayer, "_decode", counted), torch.inference_mode():
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=40,
                do_sample=False,
                cache_limit=LIMIT,
                num_sink_tokens=2,
                cache_policy=policy,
            )
        self.assertGreater(len(steady), 40, "too few steady steps to count")
        self.assertEqual(set(steady), {writes})


if __name__ == "__main__":
    unittest.main()
