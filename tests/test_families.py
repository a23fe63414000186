"""The family registry: every registered family is declared, named, tested and refused where it cannot be served."""

from __future__ import annotations

import unittest

import cachelimit
from cachelimit.families.registry import LEARNED, POSITIONS, ROPE
from cachelimit.hf import compat
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
                self.assertIn(family.positions, POSITIONS)
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


class ReadmeTest(unittest.TestCase):
    @unittest.skipUnless(compat.at_least("5.0.0"), "generated on 5.x: 4.x configs spell Gemma 3's RoPE bases apart")
    def test_supported_families_table_matches_the_registry(self):
        text = README.read_text()
        self.assertIn(supported_families_table(), text)
        self.assertEqual(readme_with_table(text), text, "regenerate it: python -m tests.readme_table")
        for name in cachelimit.supported_families():
            self.assertIn(f"| `{name}` |", text)
