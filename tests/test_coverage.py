"""The coverage table (`docs/coverage/`): every causal-LM model type of the installed transformers is classified, and
the committed table of this release is the generated one."""

from __future__ import annotations

import re
import unittest

import cachelimit
from cachelimit.families.refusals import REFUSALS
from cachelimit.families.table import SERVED_TYPES
from tests.coverage_table import (
    REFUSED,
    SERVED,
    UNCLASSIFIED,
    causal_lm_types,
    classify,
    coverage_markdown,
    coverage_path,
)


class CoverageTest(unittest.TestCase):
    def test_every_causal_lm_type_is_served_or_refused(self):
        """A new transformers release with a new type fails here until the type is classified."""
        unclassified = [name for name in causal_lm_types() if classify(name)[0] == UNCLASSIFIED]
        self.assertEqual(unclassified, [], "serve them (families/table.py) or refuse them (families/refusals.py)")

    def test_committed_table_of_this_release_is_the_generated_one(self):
        path = coverage_path()
        self.assertTrue(path.exists(), f"no {path.name}: generate it with python -m tests.coverage_table")
        self.assertEqual(path.read_text(), coverage_markdown(), "regenerate it: python -m tests.coverage_table")

    def test_every_served_type_in_the_mapping_is_patched_by_patch(self):
        """'served' is what patch() installs on this release, not a claim: each served type's family is patched."""
        for name in causal_lm_types():
            if name in SERVED_TYPES:
                with self.subTest(model_type=name):
                    family = SERVED_TYPES[name]
                    if family.available:
                        cachelimit.patch(name)
                        self.assertTrue(cachelimit.is_patched(name))
                        if family.release_needed is None:
                            self.assertEqual(classify(name)[0], SERVED)
                        else:  # patched, but its bounded runs are refused here (`Family.since`): not claimed
                            self.assertEqual(classify(name)[0], REFUSED)
                            self.assertIn(family.release_needed, classify(name)[1])
                            self.assertIn(family.since[0], classify(name)[1])
                    else:  # a later release's family: refused here, saying what this release lacks
                        self.assertEqual(classify(name)[0], REFUSED)
                        with self.assertRaisesRegex(ValueError, re.escape(family.missing[0])):
                            cachelimit.patch(name)

    def test_a_refused_type_reads_why_in_one_line(self):
        for name in causal_lm_types():
            if name in REFUSALS:
                with self.subTest(model_type=name), self.assertRaises(ValueError) as caught:
                    cachelimit.patch(name)
                self.assertIn(REFUSALS[name], str(caught.exception))
                self.assertNotIn("\n", str(caught.exception))
