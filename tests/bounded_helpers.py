"""What the full-matrix generation tests share (`tests.bounded_mixin`): building the family's tiny model, a bounded
greedy run, its comparison with the banded reference, and a record of every bounded layer update."""

from __future__ import annotations

import contextlib

import torch

from cachelimit import BoundedLayer
from tests.common import FamilyTestBase, build_tiny_model
from tests.reference import generated_step_logits

ATOL = 1e-5  # float32 logits, every step
BF16_ATOL = 8e-3  # bf16 run vs bf16 reference: ~2 bf16 ulps at the logits' scale (kernels/shapes differ)
NEW = 8


class BoundedHelpers(FamilyTestBase):
    def build(self, attn: str | None = None, dtype: torch.dtype = torch.float32, layers: int = 2, seed: int = 0, **kw):
        attn = attn or self.attentions[-1]
        self.require_attention(attn)
        return build_tiny_model(self.family, attn, dtype, seed, layers=layers, **kw)

    def bounded(self, model, ids, mask, limit, **kwargs):
        options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
        return model.generate(ids, attention_mask=mask, cache_limit=limit, **{**options, **kwargs})

    def assert_matches_reference(self, model, output, prompt_mask, limit, atol=ATOL, **reference_kw):
        expected = generated_step_logits(model, output.sequences, prompt_mask, limit, **reference_kw)
        torch.testing.assert_close(torch.stack(output.logits, dim=1), expected, atol=atol, rtol=0)
        return expected

    @contextlib.contextmanager
    def record_layer_updates(self):
        """Record (start column, new tokens, keys returned, buffer slots) of every BoundedLayer.update."""
        calls, original = [], BoundedLayer.update

        def update(layer, key_states, value_states, *args, **kwargs):
            start = layer.cumulative_length
            keys, values = original(layer, key_states, value_states, *args, **kwargs)
            self.assertEqual(keys.shape[-2], values.shape[-2])
            calls.append((start, key_states.shape[-2], keys.shape[-2], layer.keys.shape[-2], layer.values.shape[-2]))
            return keys, values

        BoundedLayer.update = update
        try:
            yield calls
        finally:
            BoundedLayer.update = original
