"""SmolLM3: the family oracles and transformers' own window (`use_sliding_window`)."""

from __future__ import annotations

import unittest

from tests.common import left_padded_batch
from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class SmolLM3FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "smollm3"
    native_window_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention",)}
    hybrid_switches = {"use_sliding_window": True, "layer_types": ("sliding_attention", "full_attention")}

    def test_sinks_with_nope_layers_match_reference(self):
        """Layers without positions (every second one here) keep their sinks as written; the others rotate them."""
        model = self.sink_build(no_rope_layer_interval=2)
        self.assertEqual(list(model.config.no_rope_layers), [1, 0])
        ids, mask = left_padded_batch([9, 3], seed=4)
        out, logits = self.run_sinks(model, ids, mask, 5, 2, 14)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 5, 2)
