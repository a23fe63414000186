"""The family registry: every registered family is declared, named, tested and refused where it cannot be served."""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized

import cachelimit
from cachelimit.family import LEARNED, ROPE
from tests.common import build_tiny_model, left_padded_batch
from tests.declarations import declared_tests, representative_families, supported_families_table
from tests.family_mixin import FamilyOracleMixin
from tests.readme_table import README, readme_with_table
from tests.sink_mixin import SinkTesterMixin


class RegistryTest(unittest.TestCase):
    def test_every_family_has_exactly_one_test_declaration(self):
        self.assertEqual(sorted(declared_tests()), cachelimit.supported_families())
        for name, test in declared_tests().items():
            with self.subTest(family=name):  # the oracles, or the full matrix that contains them
                self.assertTrue(issubclass(test, FamilyOracleMixin | SinkTesterMixin), test)

    def test_family_names_are_model_types(self):
        for name, family in cachelimit.FAMILIES.items():
            with self.subTest(family=name):
                self.assertEqual(family.config_class.model_type, name)
                for cls in family.model_classes:
                    self.assertEqual(cls.config_class.model_type, name)
                self.assertIn(family.positions, (ROPE, LEARNED))
                self.assertEqual((family.positions == LEARNED), family.check_generation is not None)

    def test_representative_subset_covers_every_kind(self):
        kinds = {cachelimit.FAMILIES[name].positions for name in representative_families()}
        self.assertEqual(kinds, {ROPE, LEARNED})

    def test_unsupported_family_error_lists_every_supported_one(self):
        with self.assertRaises(ValueError) as caught:
            cachelimit.patch("bloom")
        message = str(caught.exception)
        self.assertIn("'bloom'", message)
        self.assertIn("model_type", message)
        self.assertIn(", ".join(cachelimit.supported_families()), message)


class RefusedBeforeAnyTokenTest(unittest.TestCase):
    """What cannot be served exactly yet is a clear error before the first forward, never a silent wrong run."""

    def assert_refused(self, model, pattern, **kwargs):
        forwards = []
        handle = model.register_forward_pre_hook(lambda module, args: forwards.append(1))
        self.addCleanup(handle.remove)
        ids, mask = left_padded_batch([5, 3], seed=0)
        with self.assertRaisesRegex(ValueError, pattern):
            model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, **kwargs)
        self.assertEqual(forwards, [])

    @parameterized.expand(
        [
            ("qwen2", {"use_sliding_window": True, "max_window_layers": 1, "sliding_window": 4}),
            ("gemma2", {"layer_types": ("sliding_attention", "full_attention")}),
            ("gemma3_text", {"layer_types": ("sliding_attention", "full_attention")}),
        ]
    )
    def test_layers_mixing_attention_types(self, family, overrides):
        """The issue's reproduction: one mask for all layers gave tokens that differ from transformers' own run."""
        attn = cachelimit.FAMILIES[family].attention[0]
        model = build_tiny_model(family, attn, **overrides)
        self.assertEqual(len(set(model.config.layer_types)), 2)
        self.assert_refused(model, r"mix attention types.*1 full_attention, 1 sliding_attention", cache_limit=40)
        unbounded = model.generate(torch.ones(1, 3, dtype=torch.long), max_new_tokens=2, do_sample=False)
        self.assertEqual(unbounded.shape, (1, 5))  # without cache_limit the model is untouched

    def test_sinks_with_layers_without_positions(self):
        model = build_tiny_model("smollm3", no_rope_layer_interval=2)  # layer 1 has no RoPE (NoPE)
        self.assertEqual(list(model.config.no_rope_layers), [1, 0])
        self.assert_refused(model, r"num_sink_tokens.*different positional kinds", cache_limit=4, num_sink_tokens=1)
        model.generate(torch.ones(1, 3, dtype=torch.long), max_new_tokens=2, cache_limit=2)  # no sinks: served


class ReadmeTest(unittest.TestCase):
    def test_supported_families_table_matches_the_registry(self):
        text = README.read_text()
        self.assertIn(supported_families_table(), text)
        self.assertEqual(readme_with_table(text), text, "regenerate it: python -m tests.readme_table")
        for name in cachelimit.supported_families():
            self.assertIn(f"| `{name}` |", text)
