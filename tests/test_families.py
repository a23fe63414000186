"""The family registry: every registered family is declared, named, tested and refused where it cannot be served."""

from __future__ import annotations

import re
import unittest
from unittest import mock

import cachelimit
from cachelimit.families.refusals import REFUSALS
from cachelimit.families.registry import LEARNED, POSITION_KINDS, ROPE
from cachelimit.families.table import FAMILIES, SERVED_TYPES
from cachelimit.hf import compat
from tests.common import build_tiny_model, left_padded_batch, not_served_here
from tests.declarations import declared_tests, representative_families, supported_families_table
from tests.family_mixin import FamilyOracleMixin
from tests.readme_table import MODELS_PAGE, page_with_table
from tests.sink_mixin import SinkTesterMixin


class RegistryTest(unittest.TestCase):
    def test_every_served_type_has_exactly_one_test_declaration(self):
        """Every family has a declaration, and so has every alias with a config of its own (an alias whose config
        class is its family's, like gpt-sw3's GPT-2 config, is the family's own run)."""
        from transformers import CONFIG_MAPPING

        own_config = [
            alias
            for alias, family in SERVED_TYPES.items()
            if alias != family.name
            and alias in CONFIG_MAPPING
            and family.available
            and CONFIG_MAPPING[alias] is not family.config_class
        ]
        required = {*cachelimit.supported_families(), *own_config}
        self.assertEqual(sorted(required - set(declared_tests())), [])
        # a declaration names a served type (an alias this release lacks is declared for the releases that have it)
        self.assertEqual(sorted(set(declared_tests()) - set(SERVED_TYPES)), [])
        for name, test in declared_tests().items():
            with self.subTest(family=name):  # the oracles, or the full matrix that contains them
                self.assertTrue(issubclass(test, FamilyOracleMixin | SinkTesterMixin), test)

    def test_family_names_are_model_types(self):
        from transformers import CONFIG_MAPPING

        for name, family in SERVED_TYPES.items():
            with self.subTest(family=name):
                if name not in CONFIG_MAPPING or not family.available:
                    self.skipTest(f"{name}: not in transformers {compat.TRANSFORMERS}")
                config_class = CONFIG_MAPPING[name]
                self.assertIn(config_class.model_type, (name, family.name))
                for cls in family.model_classes:
                    self.assertEqual(cls.config_class.model_type, family.name)
                self.assertIn(family.positions, POSITION_KINDS)
                # a family whose positions come from a table has the check of its end (learned ones always do)
                if family.positions == LEARNED:
                    self.assertIsNotNone(family.check_generation)

    def test_a_model_type_is_served_or_refused_never_both(self):
        self.assertEqual(sorted(set(SERVED_TYPES) & set(REFUSALS)), [])
        self.assertEqual(sorted(set(FAMILIES) & {a for f in FAMILIES.values() for a in f.aliases}), [])

    def test_representative_subset_covers_every_kind(self):
        """Rotary and absolute positions (learned and sinusoidal share one path: sinks keep their positions)."""
        kinds = {cachelimit.FAMILIES[name].positions for name in representative_families()}
        self.assertEqual(kinds, {ROPE, LEARNED})

    def test_unknown_family_error_lists_every_supported_one(self):
        with self.assertRaises(ValueError) as caught:
            cachelimit.patch("gpt3")
        message = str(caught.exception)
        self.assertIn("'gpt3'", message)
        self.assertIn("model_type", message)
        self.assertIn(", ".join(cachelimit.supported_families()), message)

    def test_refused_model_type_says_why_in_one_line(self):
        for name, reason in REFUSALS.items():
            with self.subTest(model_type=name), self.assertRaises(ValueError) as caught:
                cachelimit.patch(name)
            message = str(caught.exception)
            self.assertEqual(message, f"cachelimit does not serve model type {name!r}: {reason}.")
            self.assertNotIn("\n", message)
        self.assertFalse(cachelimit.is_patched("bloom"))

    def test_alias_patches_its_family(self):
        was = cachelimit.is_patched("llama")
        cachelimit.unpatch("llama")
        try:
            cachelimit.patch("internlm3")
            self.assertTrue(cachelimit.is_patched("llama") and cachelimit.is_patched("internlm3"))
            cachelimit.unpatch("internlm3")
            self.assertFalse(cachelimit.is_patched("llama"))
        finally:
            if was:
                cachelimit.patch("llama")


class ModelsPageTest(unittest.TestCase):
    @unittest.skipUnless(compat.at_least("5.0.0"), "generated on 5.x: 4.x configs spell Gemma 3's RoPE bases apart")
    def test_supported_families_table_matches_the_registry(self):
        """The table of docs/models.md, the one place that lists every family with how it is verified."""
        missing = {name: family.missing for name, family in SERVED_TYPES.items() if family.missing}
        if missing:  # generated where every family is available (the README test command's pin)
            self.skipTest(f"the table lists families transformers {compat.TRANSFORMERS} lacks: {sorted(missing)}")
        text = MODELS_PAGE.read_text(encoding="utf-8")
        self.assertIn(supported_families_table(), text)
        self.assertEqual(page_with_table(text), text, "regenerate it: python -m tests.readme_table")
        for name in cachelimit.supported_families():
            self.assertIn(f"| `{name}` |", text)


class ReleaseRefusalTest(unittest.TestCase):
    def test_a_family_needing_a_later_release_is_refused_by_name_before_any_forward(self):
        """`Family.since`: on a release before the one a family needs, a bounded run raises a ValueError naming the
        release and the reason, before the model runs. Checked on one served family per such requirement, with the
        requirement moved past the installed release (so it runs on every release that has the model)."""
        required = {}  # (reason, release constant) -> (a family needing it, the release it is checked against)
        for name in cachelimit.supported_families():
            family = cachelimit.FAMILIES[name]
            if family.since is None or not family.available:
                continue
            release = getattr(compat, family.since[1])
            if not compat.at_least(release):  # the real refusal, on this older release
                required.setdefault(family.since, (name, release))
            elif not_served_here(name) is None:
                required.setdefault(family.since, (name, "99.0.0"))
        self.assertTrue(required, "no family with a release requirement exists here")
        for (reason, constant), (name, release) in required.items():
            with self.subTest(family=name, needs=constant):
                model = build_tiny_model(name, "eager")
                ids, mask = left_padded_batch([5, 3], seed=0)
                forwards = []
                handle = model.register_forward_hook(lambda *args, seen=forwards: seen.append(1))
                try:
                    with mock.patch.object(compat, constant, release):
                        error = str(self._refusal(model, ids, mask))
                    pattern = rf"needs transformers >= {re.escape(release)}.*{re.escape(str(compat.TRANSFORMERS))}"
                    self.assertRegex(error, pattern)
                    self.assertIn(reason, error)
                    self.assertEqual(forwards, [])
                finally:
                    handle.remove()

    @staticmethod
    def _refusal(model, ids, mask) -> ValueError:
        try:
            model.generate(ids, attention_mask=mask, max_new_tokens=2, cache_limit=4)
        except ValueError as error:
            return error
        raise AssertionError("not refused")
