"""ModernBERT decoder: the family oracles, its own window and its layer mix (one full layer in three); one rotary
base per layer type. Its config derives `sliding_window` from `local_attention` (half of it), so the tests' windows
are set through `local_attention`. Its weights are initialised with a small truncated std, whose tiny logits would let a
window one position off differ by less than the tests' 100x tolerance margin: the tiny config uses std 0.1."""

from __future__ import annotations

import unittest

from cachelimit.hf import compat
from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin


class ModernbertDecoderFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, HybridOracleMixin, unittest.TestCase):
    family = "modernbert-decoder"
    tiny_config = {"local_attention": 128, "initializer_range": 0.1}
    notes = "`sliding_window` is half of `local_attention`"
    native_window_switches = {"layer_types": ("sliding_attention",)}

    def build(self, attn=None, layers=2, **overrides):
        if "sliding_window" in overrides:  # the config recomputes sliding_window from local_attention
            overrides["local_attention"] = 2 * overrides.pop("sliding_window")
        try:
            model = super().build(attn, layers, **overrides)
        except Exception as error:  # noqa: BLE001 - only the one failure below is skipped, any other re-raised
            if set(overrides.get("layer_types", ())) != {"sliding_attention"} or "rope_parameters" not in str(error):
                raise
            self.skipTest(
                f"transformers {compat.TRANSFORMERS} cannot build a ModernBERT decoder whose layers all slide: its "
                f"config rejects the rope_parameters it derives for them ({type(error).__name__})"
            )
        local_attention = overrides.get("local_attention", self.tiny_config["local_attention"])
        self.assertEqual(model.config.sliding_window, local_attention // 2)  # 4.x's config keeps only this one
        return model
