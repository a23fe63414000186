"""A plan follows each layer's device (issue 18): the layers of a model split across devices read the plan's tensors
on their own device (`StepPlan.on`), made once per step and device. No second device here: "meta" stands in for it,
which is enough to show that every tensor a layer reads is moved and nothing else changes."""

from __future__ import annotations

import dataclasses
import unittest

import torch

from cachelimit import BoundedCache
from cachelimit.core.plan import LAYER_TENSORS
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.common import build_tiny_model, left_padded_batch


class PlanDevicesTest(unittest.TestCase):
    def plans(self):
        """The plans of a bounded run with RoPE sinks over a left-padded batch, as its first layer got them."""
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([9, 5], seed=2)
        cache, seen = BoundedCache.from_model(model, 6, 2), []
        handle = model.model.layers[0].register_forward_pre_hook(lambda *_: seen.append(cache.groups[0].plan))
        try:
            with torch.inference_mode():
                model.generate(ids, attention_mask=mask, max_new_tokens=8, **{CACHE_ARGUMENT: cache})
        finally:
            handle.remove()
        return seen

    def test_every_layer_tensor_moves_and_nothing_else(self):
        plans = self.plans()
        self.assertEqual(len(plans), 8)
        self.assertTrue(any(plan.rotations for plan in plans if plan.decode))  # RoPE sinks: rotations to move
        self.assertFalse(plans[0].decode)
        meta = torch.device("meta")
        for plan in plans:
            moved = plan.on(meta)
            self.assertIs(plan.on(plan.device), plan)  # its own device: the plan itself
            self.assertIs(plan.on(meta), moved)  # once per step and device
            for name in LAYER_TENSORS:
                before, after = getattr(plan, name), getattr(moved, name)
                self.assertEqual(before is None, after is None, name)
                if before is not None:
                    self.assertEqual(after.device, meta, name)
                    self.assertEqual((after.shape, after.dtype), (before.shape, before.dtype), name)
            for kind, pair in moved.rotations.items():
                self.assertEqual([t.device for t in pair], [meta, meta], kind)
            host = {f.name for f in dataclasses.fields(plan)} - {*LAYER_TENSORS, "rotations", "by_device", "memo"}
            for name in host:
                self.assertIs(getattr(moved, name), getattr(plan, name), name)  # host fields and shared tensors


if __name__ == "__main__":
    unittest.main()
