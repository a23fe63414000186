"""transformers' compiled decoding (`generate(..., compile_config=...)`) around a bounded cache: no recompiles once the
ring has its shape, the same tokens and logits as the eager bounded run, and the eager safety checks kept outside the
graph (issue 18).

transformers' own static sliding window recompiles at every step until dynamo gives up (its layers guard on an int
that changes every step: transformers issue #44609). A bounded cache plans each step before the forward and hands
the compiled forward only tensors and fixed shapes (`core.plan`), so a static ring (`BoundedCache(static=True)`)
compiles once, and a growing one once per shape its ring takes (at most one per doubling).

The compile counts come from a backend that counts its calls and runs the captured graph as it is (dynamo's guards,
which decide recompiles, do not depend on the backend); one test runs inductor itself, on a short run. On CPU
transformers compiles only with `CompileConfig._compile_all_devices` (on CUDA a compileable cache is compiled by
default).
"""

from __future__ import annotations

import collections
import statistics
import unittest

import pytest
import torch
from parameterized import parameterized
from torch.profiler import ProfilerActivity, profile
from transformers import CompileConfig, StoppingCriteria, StoppingCriteriaList

from cachelimit import BoundedCache
from cachelimit.bench.op_count import OpCounter
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.common import build_tiny_model, left_padded_batch

pytestmark = pytest.mark.compile

LIMIT, STEPS = 12, 200


class StepCounter(StoppingCriteria):
    """Counts the tokens chosen so far (transformers calls it after every forward but prefill chunks, outside the
    compiled forward: a hook on the model would be traced into the graph)."""

    def __init__(self):
        self.steps = 0

    def __call__(self, input_ids, scores, **kwargs):
        self.steps += 1
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def counting_backend(counter: StepCounter, compiles: list):
    """A `torch.compile` backend that records in `compiles`, for each compile, the step it happened in (0: the
    prefill, 1: the first decode step, ...), and runs the captured graph as it is. A function, not an object:
    `CompileConfig` deep-copies its fields, and a copied object would count into its own list."""

    def backend(graph_module, example_inputs):
        compiles.append(counter.steps)
        return graph_module.forward

    return backend


def compile_config(backend) -> CompileConfig:
    config = CompileConfig(backend=backend, mode=None, fullgraph=True)  # fullgraph: a graph break is an error
    config._compile_all_devices = True  # transformers compiles on CPU only when told to
    return config


def generate(model, ids, mask, cache, new_tokens: int, config=None, **options):
    with torch.inference_mode():
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
            compile_config=config,
            **{CACHE_ARGUMENT: cache},
            **options,
        )


def compiled_run(model, ids, mask, cache, new_tokens: int, stopping_criteria=(), **options):
    """A compiled bounded run; returns it and the step of each compile (`counting_backend`)."""
    torch._dynamo.reset()
    counter, compiles = StepCounter(), []
    backend = counting_backend(counter, compiles)
    stop = StoppingCriteriaList([counter, *stopping_criteria])
    try:
        out = generate(model, ids, mask, cache, new_tokens, compile_config(backend), stopping_criteria=stop, **options)
    finally:
        torch._dynamo.reset()
    return out, compiles


class CompiledDecodeTest(unittest.TestCase):
    def assert_same_run(self, compiled, eager):
        self.assertTrue(torch.equal(compiled.sequences, eager.sequences))
        for step, (a, b) in enumerate(zip(compiled.logits, eager.logits, strict=True)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=f"step {step}")

    @parameterized.expand(
        [
            ("window", "mistral", [9, 9], 0, None),
            ("sinks", "llama", [9, 9], 4, None),
            ("left_padded_sinks", "llama", [9, 4], 2, None),
            ("chunked_prefill", "mistral", [9, 6], 0, 4),
            ("hybrid", "gemma3_text", [9, 7], 0, None),
        ]
    )
    def test_static_ring_compiles_once_and_equals_eager(self, _, family, lengths, sinks, chunk):
        model = build_tiny_model(family, "eager" if family == "gemma3_text" else "sdpa")
        ids, mask = left_padded_batch(lengths, seed=6)
        options = {"prefill_chunk_size": chunk} if chunk else {}

        def cache():
            return BoundedCache.from_model(model, LIMIT, sinks, static=True, window_prefill=chunk is not None)

        eager = generate(model, ids, mask, cache(), STEPS + 1, **options)
        compiled, compiles = compiled_run(model, ids, mask, cache(), STEPS + 1, **options)
        # transformers compiles a chunked prefill too (step 0, one graph per chunk width); decoding compiles once
        self.assertEqual([step for step in compiles if step > 0], [1], f"compiles in steps {compiles}")
        self.assert_same_run(compiled, eager)

    @parameterized.expand([("keydiff", 0), ("tova", 2), ("snapkv", 0)])
    def test_scored_policy_compiles_without_recompiling_once_evicting(self, policy, sinks):
        """A scored policy (issue 25): decode compiles while the layer fills (slot = column), once when it first
        evicts, once when it writes into freed slots, once when the last pad has left (its steps need a mask and
        the pads' scores left out until then), then never again; the same tokens and logits as eager."""
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([9, 5], seed=6)

        def cache():
            return BoundedCache.from_model(model, LIMIT, sinks, static=True, cache_policy=policy)

        eager = generate(model, ids, mask, cache(), STEPS + 1)
        compiled, compiles = compiled_run(model, ids, mask, cache(), STEPS + 1)
        decode_compiles = [step for step in compiles if step > 0]
        steady = LIMIT + 2 - ids.shape[1]  # the first decode step that writes into a freed slot
        pads = int((mask == 0).sum(1).max())  # one pad leaves per step from then on
        self.assertLessEqual(len(decode_compiles), 4, compiles)
        self.assertEqual([step for step in decode_compiles if step > steady + pads], [], compiles)
        self.assert_same_run(compiled, eager)

    @parameterized.expand([("window", None, 0), ("sinks", None, 4), ("keydiff", "keydiff", 2), ("tova", "tova", 0)])
    def test_buffers_a_compiled_step_writes_keep_a_fixed_address(self, _, policy, sinks):
        """On CUDA, inductor skips CUDA graphs for a step that writes an input not marked static (seen for the
        static ring on an H200, docs/gpu.md): every buffer a decode step writes in place is marked, as transformers'
        static caches mark theirs, and so is every buffer after the ring grew."""
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([9, 5], seed=6)
        for static in (True, False):
            cache = BoundedCache.from_model(model, LIMIT, sinks, static=static, cache_policy=policy)
            generate(model, ids, mask, cache, 24)
            for index, layer in enumerate(cache.layers):
                written = ["keys", "values"] + (["free", *layer.slot_tensors] if policy else [])
                unmarked = [name for name in written if not hasattr(getattr(layer, name), "_dynamo_static_input_type")]
                self.assertEqual(unmarked, [], f"layer {index}, static={static}")

    def test_growing_ring_recompiles_only_when_it_grows(self):
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([6, 6], seed=7)
        limit = 40  # ring of 41 slots: decode steps see 12, 24 and 41 allocated slots (tests/growth_spec.py)
        eager = generate(model, ids, mask, BoundedCache.from_model(model, limit), STEPS + 1)
        compiled, compiles = compiled_run(model, ids, mask, BoundedCache.from_model(model, limit), STEPS + 1)
        ring_full = limit + 1 - ids.shape[1]  # the decode step from which the ring has all its slots
        decode_compiles = [step for step in compiles if step > 0]
        self.assertLessEqual(len(decode_compiles), 3, compiles)  # at most one per shape the ring takes
        self.assertEqual([step for step in decode_compiles if step > ring_full], [], compiles)
        self.assert_same_run(compiled, eager)

    def test_a_compiled_forward_interrupted_half_way_is_refused(self):
        """The eager layers check their progress inside the forward; a compiled layer records the plan it carried
        out and the cache counts it outside the graph: a continuation after a forward interrupted between its
        layers is refused, one interrupted after its forward is refused as ahead of the sequences."""
        model = build_tiny_model("mistral")
        ids, mask = left_padded_batch([9, 9], seed=8)
        armed = {"layer": False}

        class ArmAt(StoppingCriteria):
            def __init__(self, at: int, fault: str):
                self.at, self.calls, self.fault = at, 0, fault

            def __call__(self, input_ids, scores, **kwargs):
                self.calls += 1
                if self.calls == self.at:
                    if self.fault == "criterion":
                        raise RuntimeError("injected between steps")
                    armed["layer"] = True
                return torch.zeros(input_ids.shape[0], dtype=torch.bool)

        def raise_when_armed(module, args):
            if armed["layer"]:
                raise RuntimeError("injected in layer 1")

        handle = model.model.layers[1].register_forward_pre_hook(raise_when_armed)
        try:
            for fault, message in [("layer", "interrupted in the middle of a forward"), ("criterion", "seen")]:
                armed["layer"] = False
                cache = BoundedCache.from_model(model, LIMIT, static=True)
                with self.assertRaisesRegex(RuntimeError, "injected"):
                    compiled_run(model, ids, mask, cache, 40, stopping_criteria=[ArmAt(20, fault)])
                armed["layer"] = False
                longer = torch.cat([ids, ids[:, :2]], dim=1)
                with self.assertRaisesRegex(ValueError, message):
                    generate(model, longer, torch.ones_like(longer), cache, 2)
        finally:
            handle.remove()


class EagerPlanningTest(unittest.TestCase):
    def test_sinks_add_no_eager_rotation_before_a_compileable_decode_step(self):
        """The sinks of a cache that may be compiled are rotated in the forward (inside the graph when it is compiled:
        fused there; the test above shows the result equal to eager), not before it, where each step paid some 50
        aten ops on 4 layers. Counted over `begin_step`, the eager planning around every forward: a full-window
        decode step with 4 RoPE sinks dispatches at most 4 ops more than one without sinks (the sink shift)."""
        model = build_tiny_model("llama", layers=4)
        ids, mask = left_padded_batch([9, 9], seed=3)
        per_step = {}
        for sinks in (0, 4):
            cache, counts = BoundedCache.from_model(model, LIMIT, sinks, static=True), []
            begin_step = cache.begin_step

            def counted(new_real, begin_step=begin_step, counts=counts):
                with OpCounter() as counter:
                    plan = begin_step(new_real)
                counts.append(counter.total())
                return plan

            cache.begin_step = counted
            generate(model, ids, mask, cache, 40)
            per_step[sinks] = statistics.median(counts[-20:])  # the window is full from step 4
        self.assertLessEqual(per_step[4] - per_step[0], 4, per_step)

    def test_only_the_forward_is_compiled(self):
        """The hook a bounded run installs on the model (`hf.attention_maps`) runs outside the graph: compiled as a
        frame of its own, its guards were checked at every decode step. One compiled region per decode step."""
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([9, 9], seed=4)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _, compiles = compiled_run(model, ids, mask, BoundedCache.from_model(model, LIMIT, 2, static=True), 20)
        regions = collections.Counter(e.name for e in prof.events() if e.name.startswith("Torch-Compiled Region"))
        self.assertEqual(compiles, [1])
        self.assertEqual(len(regions), 1, regions)  # the forward's frame only
        self.assertEqual(sum(regions.values()), 19, regions)  # once per decode step after the one that compiles


class InductorTest(unittest.TestCase):
    def test_inductor_runs_a_static_ring_with_sinks_like_eager(self):
        """The default backend end to end (C++ kernels on CPU): a short run, left padded, with RoPE sinks."""
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([9, 5], seed=9)

        def cache():
            return BoundedCache.from_model(model, 8, 2, static=True)

        eager = generate(model, ids, mask, cache(), 24)
        torch._dynamo.reset()
        try:
            compiled = generate(model, ids, mask, cache(), 24, compile_config("inductor"))
        finally:
            torch._dynamo.reset()
        self.assertTrue(torch.equal(compiled.sequences, eager.sequences))
        for a, b in zip(compiled.logits, eager.logits, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
