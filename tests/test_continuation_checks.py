"""A returned cache continues only on the model that filled it, and a run keeps the methods it began with (issue 20,
defects 3 and 4).

A `BoundedCache` records the model it was built for or filled by; handing it to another model (other weights, other
key/value heads or head size, another dtype or device) is a `ValueError` that says so before any forward, and leaves
the cache as it was (it still continues exactly on its own model). An `unpatch()` while a bounded `generate` runs
(from another thread, or from inside the run) does not break that run: it finishes as it started.
"""

from __future__ import annotations

import copy
import threading
import unittest

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

import cachelimit
from cachelimit import BoundedCache
from tests.common import build_tiny_model, given_cache, left_padded_batch, returned_cache
from tests.reference import extended_mask

LIMIT, NEW = 4, 6


def run(model, ids, mask, **kwargs):
    options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
    return model.generate(ids, attention_mask=mask, cache_limit=LIMIT, **{**options, **kwargs})


class ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self.count)

    def count(self, module, args):
        self.calls += 1

    def close(self):
        self.handle.remove()


class ContinuationOwnerTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama", layers=3)
        self.ids, self.mask = left_padded_batch([5, 7], seed=3)
        first = run(self.model, self.ids, self.mask)
        self.cache = returned_cache(first)
        self.sequences, self.full_mask = first.sequences, extended_mask(self.mask, first.sequences)

    def assert_refused_before_any_forward(self, other, pattern):
        counter = ForwardCounter(other)
        try:
            with self.assertRaisesRegex(ValueError, pattern):
                run(other, self.sequences, self.full_mask, **given_cache(self.cache))
        finally:
            counter.close()
        self.assertEqual(counter.calls, 0)
        self.assert_still_continues_on_its_model()

    def assert_still_continues_on_its_model(self):
        """The refusal left the cache untouched: continuing on its own model equals one long run."""
        resumed = run(self.model, self.sequences, self.full_mask, **given_cache(self.cache))
        whole = run(self.model, self.ids, self.mask, max_new_tokens=2 * NEW)
        self.assertTrue(torch.equal(resumed.sequences, whole.sequences))

    def test_other_weights_of_the_same_shape_are_refused(self):
        other = build_tiny_model("llama", layers=3, seed=1)
        self.assert_refused_before_any_forward(other, "past_key_values.*another model")

    def test_other_key_value_heads_are_refused(self):
        other = build_tiny_model("llama", layers=3, num_key_value_heads=4)
        self.assert_refused_before_any_forward(other, "past_key_values.*another model")

    def test_other_head_size_is_refused(self):
        other = build_tiny_model("llama", layers=3, head_dim=16)
        self.assert_refused_before_any_forward(other, "past_key_values.*another model")

    def test_the_same_model_cast_to_another_dtype_is_refused(self):
        weights = copy.deepcopy(self.model.state_dict())
        self.model.to(torch.bfloat16)
        try:
            with self.assertRaisesRegex(ValueError, "past_key_values.*float32.*bfloat16"):
                run(self.model, self.sequences, self.full_mask, **given_cache(self.cache))
        finally:
            self.model.to(torch.float32).load_state_dict(weights)  # the float32 weights, not their bfloat16 rounding
        self.assert_still_continues_on_its_model()

    def test_a_cache_built_for_one_model_is_refused_on_another(self):
        """`BoundedCache.from_model(model)` fits the cache to that model (its rotary, its window)."""
        cache = BoundedCache.from_model(self.model, LIMIT, 1)
        other = build_tiny_model("llama", layers=3, seed=2)
        with self.assertRaisesRegex(ValueError, "past_key_values.*another model"):
            run(other, self.ids, self.mask, **given_cache(cache), num_sink_tokens=1)

    def test_a_fresh_hand_built_cache_is_bound_to_its_first_model(self):
        cache = BoundedCache(LIMIT)
        run(self.model, self.ids, self.mask, **given_cache(cache))
        other = build_tiny_model("llama", layers=3, seed=4)
        with self.assertRaisesRegex(ValueError, "past_key_values.*another model"):
            run(other, self.sequences, self.full_mask, **given_cache(cache))

    def test_interrupted_in_its_first_forward_is_refused_as_interrupted(self):
        calls = []

        def fail(module, args):
            calls.append(1)
            raise RuntimeError("fault in the first forward")

        cache = BoundedCache(LIMIT)
        handle = self.model.model.layers[1].register_forward_pre_hook(fail)
        try:
            with self.assertRaisesRegex(RuntimeError, "fault in the first forward"):
                run(self.model, self.ids, self.mask, **given_cache(cache))
        finally:
            handle.remove()
        with self.assertRaisesRegex(ValueError, "interrupted in the middle of a forward"):
            run(self.model, self.ids, self.mask, **given_cache(cache))


class UnpatchDuringARunTest(unittest.TestCase):
    """Defect 4: `unpatch()` while a bounded run is going used to kill it with an error blaming the caller."""

    def setUp(self):
        self.model = build_tiny_model("llama")
        self.ids, self.mask = left_padded_batch([5, 7], seed=4)
        self.addCleanup(cachelimit.patch, "llama")

    def test_unpatch_inside_the_run_lets_it_finish_as_it_started(self):
        clean = run(self.model, self.ids, self.mask, num_sink_tokens=1)

        class UnpatchAt(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                if input_ids.shape[1] == 9:  # after two generated tokens
                    cachelimit.unpatch("llama")
                return torch.zeros(input_ids.shape[0], dtype=torch.bool)

        criteria = StoppingCriteriaList([UnpatchAt()])
        out = run(self.model, self.ids, self.mask, num_sink_tokens=1, stopping_criteria=criteria)
        self.assertFalse(cachelimit.is_patched("llama"))
        self.assertTrue(torch.equal(out.sequences, clean.sequences))
        torch.testing.assert_close(torch.stack(out.logits), torch.stack(clean.logits), atol=0, rtol=0)
        self.assertNotIn("prepare_inputs_for_generation", vars(self.model))  # the run's own methods are gone
        with self.assertRaises(ValueError):  # unpatched: transformers itself refuses the unknown argument
            run(self.model, self.ids, self.mask)

    def test_a_wrapper_the_caller_set_on_the_instance_is_left_alone(self):
        clean = run(self.model, self.ids, self.mask)
        calls, prepare = [], self.model.prepare_inputs_for_generation

        def wrapper(*args, **kwargs):
            calls.append(1)
            return prepare(*args, **kwargs)

        self.model.prepare_inputs_for_generation = wrapper
        try:
            out = run(self.model, self.ids, self.mask)
            self.assertIs(vars(self.model)["prepare_inputs_for_generation"], wrapper)
        finally:
            del self.model.prepare_inputs_for_generation
        self.assertEqual(len(calls), NEW)  # every forward of the run went through it
        self.assertTrue(torch.equal(out.sequences, clean.sequences))

    def test_unpatch_from_another_thread_lets_the_run_finish(self):
        clean = run(self.model, self.ids, self.mask)
        started, unpatched = threading.Event(), threading.Event()

        class WaitForUnpatch(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                if input_ids.shape[1] == 8:
                    started.set()
                    unpatched.wait(timeout=30)
                return torch.zeros(input_ids.shape[0], dtype=torch.bool)

        result = {}

        def target():
            try:
                result["out"] = run(self.model, self.ids, self.mask, stopping_criteria=[WaitForUnpatch()])
            except Exception as error:  # reported below
                result["error"] = error

        thread = threading.Thread(target=target)
        thread.start()
        self.assertTrue(started.wait(timeout=30))
        cachelimit.unpatch("llama")
        unpatched.set()
        thread.join(timeout=60)
        self.assertNotIn("error", result)
        self.assertTrue(torch.equal(result["out"].sequences, clean.sequences))


class UnfittedCacheTest(unittest.TestCase):
    def test_a_hand_built_cache_outside_a_bounded_run_is_a_clear_error(self):
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([5], seed=5)
        cachelimit.unpatch("llama")
        self.addCleanup(cachelimit.patch, "llama")
        with self.assertRaisesRegex(RuntimeError, "not fitted|before it was fitted"):
            model.generate(ids, attention_mask=mask, **given_cache(BoundedCache(LIMIT)), max_new_tokens=2)


if __name__ == "__main__":
    unittest.main()
