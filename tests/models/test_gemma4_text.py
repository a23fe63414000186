"""Gemma 4 (text): sliding and full layers, proportional partial RoPE on the full layers (their own head dimension),
and KV sharing: the later layers read the keys and values of the last earlier layer of their type."""

from __future__ import annotations

import unittest

from tests.common import left_padded_batch
from tests.family_mixin import FamilyOracleMixin
from tests.hybrid_mixin import HybridOracleMixin, KVSharingOracleMixin


class Gemma4TextFamilyTest(FamilyOracleMixin, HybridOracleMixin, KVSharingOracleMixin, unittest.TestCase):
    family = "gemma4_text"
    tiny_config = {
        "layer_types": ("sliding_attention", "full_attention"),
        "global_head_dim": 16,  # full layers have their own, larger head dimension (512 against 256)
        "num_kv_shared_layers": lambda layers: max(0, layers - 2),  # every layer after one of each type
        "hidden_size_per_layer_input": 8,
        "vocab_size_per_layer_input": 61,
    }
    notes = "KV sharing; proportional RoPE (a quarter of the dims) on full layers, with their own head size"

    def test_bidirectional_attention_is_refused_before_any_forward(self):
        """`use_bidirectional_attention="all"` (embedding checkpoints) makes tokens read later ones: no cache of past
        keys serves that, so a bounded run is refused by name before the model runs (an unbounded one is not)."""
        model = self.build(use_bidirectional_attention="all")
        ids, mask = left_padded_batch([5, 3], seed=0)
        forwards = []
        handle = model.register_forward_hook(lambda *args: forwards.append(1))
        try:
            with self.assertRaisesRegex(ValueError, "use_bidirectional_attention='all'"):
                self.generate(model, ids, mask, 4)
            self.assertEqual(forwards, [])
            self.generate(model, ids, mask, None, max_new_tokens=1)
            self.assertTrue(forwards)
        finally:
            handle.remove()
