"""The external test bed (tests/external/): which `generate` calls get the default limit (a call that chooses its
cache keeps it; read from the cache the forward received), which files run in which modes (from the registry and a
fake suite: none of transformers' tests run), that the rotation covers every file, that the runner's checks fail on
what they must, and that every test not counted as a pass is named with a reason (checked against the shared suite
where this machine has it: no entry for a test it does not hold).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import DynamicCache, GenerationConfig

from cachelimit import BoundedCache

from .cli_helpers import REPO
from .common import build_tiny_model, given_cache, left_padded_batch
from .peer_helpers import EXTERNAL, external
from .registry_helpers import seen_caches

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

SUITE = REPO.parent / "shared" / "peer-suite" / "transformers-tests"


plugin, plan, reasons = external("peer_plugin"), external("peer_plan"), external("peer_reasons")
runner, checks = external("run_peer_suite"), external("peer_checks")


def fake_suite(root: Path, families) -> Path:
    for family in families:
        path = root / plan.suite_file(family)
        path.parent.mkdir(parents=True)
        path.write_text("")
    (root / "tests" / "models").mkdir(parents=True, exist_ok=True)
    return root


class DefaultLimitTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama")
        self.ids, self.mask = left_padded_batch([3, 4])

    def first_cache(self, **kwargs):
        generate = plugin._with_default_limit(type(self.model).generate)
        with seen_caches(self.model) as caches:
            generate(self.model, self.ids, attention_mask=self.mask, max_new_tokens=2, **kwargs)
        return caches[0]

    def test_plain_call_gets_the_default_limit(self):
        with mock.patch.dict(plugin.CALLS, clear=True):
            cache = self.first_cache()
            self.first_cache(cache_limit=3)
            self.assertEqual(plugin.CALLS, {"llama": [1, 1, 0]})  # counted: a limit run that bounds nothing fails
        self.assertIsInstance(cache, BoundedCache)
        self.assertEqual(cache.policy.limit, plugin.LIMIT)

    def test_calls_the_limit_cut_are_counted(self):
        # the batch's prompt is 4 wide, 2 new tokens: 6 positions; a limit of 5 cuts at the last step, 6 never
        for limit, cut in [(5, 1), (6, 0), (4096, 0)]:
            with mock.patch.dict(plugin.CALLS, clear=True), mock.patch.object(plugin, "LIMIT", limit):
                self.assertEqual(self.first_cache().policy.limit, limit)
                self.first_cache(cache_limit=3)  # its own limit: not the default's to count
                self.assertEqual(plugin.CALLS, {"llama": [1, 1, cut]}, limit)

    def test_sequence_length_counts_the_prompt_however_given(self):
        ids, embeds, new = torch.zeros(2, 7, dtype=torch.long), torch.zeros(2, 7, 8), torch.zeros(2, 3)
        self.assertEqual(plugin.sequence_length(ids, {}, torch.zeros(2, 10)), 10)
        self.assertEqual(plugin.sequence_length(None, {"input_ids": ids}, mock.Mock(sequences=new)), 7)
        self.assertEqual(plugin.sequence_length(None, {"inputs_embeds": embeds}, mock.Mock(sequences=new)), 10)
        both = {"input_ids": ids, "inputs_embeds": embeds}
        self.assertEqual(plugin.sequence_length(None, both, torch.zeros(2, 10)), 10)  # ids given: the prompt is in

    def test_calls_that_choose_their_cache_keep_it(self):
        given = DynamicCache(config=self.model.config)
        self.assertIs(self.first_cache(**given_cache(given)), given)
        self.assertNotIsInstance(self.first_cache(cache_implementation="static"), BoundedCache)
        config = GenerationConfig(max_new_tokens=2, pad_token_id=0, use_cache=False)
        self.assertIsNone(self.first_cache(generation_config=config))
        self.assertEqual(self.first_cache(cache_limit=3).policy.limit, 3)


class NamedListsTest(unittest.TestCase):
    def entries(self):
        yield from reasons.SKIPS.items()
        yield from reasons.CUT.items()
        yield from reasons.CROSS_PATH.items()
        yield from reasons.VACUOUS.items()
        for family, tests in reasons.BASELINE.items():
            yield from ((f"{family}::{name}", reason) for name, reason in tests.items())

    def test_every_entry_has_a_reason(self):
        for name, reason in self.entries():
            self.assertTrue(name.split("::")[-1].startswith("test_"), name)
            self.assertGreater(len(reason), 40, name)
        for family, reason in reasons.FILES.items():
            self.assertGreater(len(reason), 40, family)

    def test_plugin_reads_the_lists(self):
        self.assertIs(plugin.SKIPS, reasons.SKIPS)
        with mock.patch.dict(reasons.BASELINE, {"llama": {"test_x": "r" * 41}}):
            self.assertEqual(plugin.baseline_reason("llama", "test_x_1_eager"), "r" * 41)
            self.assertIsNone(plugin.baseline_reason("gpt2", "test_x"))

    def test_parameterized_variants_only(self):
        reason = reasons.SKIPS["test_assisted_decoding_matches_greedy_search"]
        self.assertEqual(plugin.skip_reason("test_assisted_decoding_matches_greedy_search_0_random"), reason)
        self.assertEqual(plugin.skip_reason("test_assisted_decoding_matches_greedy_search"), reason)
        self.assertIsNone(plugin.skip_reason("test_assisted_decoding_matches_greedy_search_with_sampling"))
        self.assertIsNone(plugin.skip_reason("test_left_padding_compatibility"))

    def test_each_list_applies_in_its_modes(self):
        skipped, cut = next(iter(reasons.SKIPS)), next(iter(reasons.CUT))
        for mode in plan.MODES:
            bounded = mode in plan.DEFAULT_LIMITS
            self.assertEqual(plugin.skip_reason(skipped, mode), reasons.SKIPS[skipped] if bounded else None, mode)
            self.assertEqual(plugin.cut_reason(cut, mode), reasons.CUT[cut] if mode == "limit-cut" else None, mode)

    def test_cross_path_tests_are_never_named_away(self):
        for name in reasons.CROSS_PATH:
            self.assertEqual(plugin.cross_path(name), reasons.CROSS_PATH[name])
            for listed in (reasons.SKIPS, reasons.CUT, *reasons.BASELINE.values()):
                self.assertIsNone(reasons.match(name, listed), name)
            self.assertNotIn(name, reasons.VACUOUS)  # matched exactly (its variants are other tests)
        self.assertIsNone(plugin.cross_path("test_generate_from_inputs_embeds"))  # the vacuous base name: exact only

    @unittest.skipUnless(SUITE.is_dir(), f"transformers' test suite is not at {SUITE} on this machine")
    def test_entries_name_tests_of_the_suite(self):
        mixins = [*SUITE.glob("tests/*.py"), *SUITE.glob("tests/generation/*.py")]
        defined = set(re.findall(r"def (test_\w+)\(", "".join(path.read_text(encoding="utf-8") for path in mixins)))
        self.assertLessEqual({*reasons.SKIPS, *reasons.VACUOUS}, defined)
        files = "".join(path.read_text(encoding="utf-8") for path in SUITE.glob("tests/models/*/test_modeling_*.py"))
        self.assertLessEqual(set(reasons.CUT), defined | set(re.findall(r"def (test_\w+)\(", files)))  # a file's own
        for name in reasons.CROSS_PATH:  # a `parameterized.expand` variant: its base is defined
            self.assertIn(re.sub(r"_\d+_\w+$", "", name), defined, name)
        for family in [*reasons.BASELINE, *reasons.FILES]:
            self.assertTrue((SUITE / plan.suite_file(family)).is_file(), family)
        for family, tests in reasons.BASELINE.items():
            text = (SUITE / plan.suite_file(family)).read_text(encoding="utf-8")
            names = defined | set(re.findall(r"def (test_\w+)\(", text))
            for qualified in tests:
                cls, _, name = qualified.rpartition("::")  # a test of one class only: that class is the file's
                self.assertTrue(not cls or f"class {cls}(" in text, qualified)
                self.assertTrue(any(name == test or name.startswith(test + "_") for test in names), qualified)


FAKE_FILE = """
import unittest

import pytest

class FakeModelTest(unittest.TestCase):
    def test_plain(self): pass
    def test_returns_a_function(self): return lambda: None
    def test_prompt_lookup_decoding_matches_greedy_search(self): return lambda: None
    def test_listed(self): raise AssertionError("the snapshot's own failure")
    def test_listed_passes(self): pass
    def test_greedy_generate_dict_outputs_use_cache(self): pass
    def test_generate_cut_changes_it(self): raise AssertionError("a bounded run compared with an unbounded one")
    @pytest.mark.generate
    def test_marked_decoding(self): pass

class FakeImageToTextTest(unittest.TestCase):  # tests only a class cachelimit does not patch: deselected
    from transformers import LlamaModel
    all_model_classes = (LlamaModel,)
    def test_image_only(self): pass

class FakeCausalLMTest(unittest.TestCase):  # tests a class cachelimit patches: kept
    from transformers import LlamaForCausalLM, LlamaModel
    all_model_classes = (LlamaModel, LlamaForCausalLM)
    def test_text_kept(self): pass
"""
FAKE_CONFTEST = """
import os
import peer_reasons


peer_reasons.BASELINE["llama"] = {"test_listed": "fails unpatched", "test_listed_passes": "stale entry"}
peer_reasons.CUT.clear()
peer_reasons.CUT["test_generate_cut_changes_it"] = "compares with an unbounded run"
if os.environ.get("FAKE_CROSS_PATH_NAMED_AWAY"):
    peer_reasons.CROSS_PATH["test_generate_cut_changes_it"] = "named in CUT: refused"
"""


class PluginRunTest(unittest.TestCase):
    """The plugin in a real pytest run of a fake model file: what each list does to a test's outcome."""

    def outcomes(self, mode, **environment):
        return self.run_fake(mode, **environment)[0]

    def run_fake(self, mode, **environment):
        """(test -> outcome, pytest's output) of the fake file in `mode`."""
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "conftest.py").write_text(FAKE_CONFTEST)
            fake_suite(root, ["llama"])
            (root / plan.suite_file("llama")).write_text(FAKE_FILE)
            path = os.pathsep.join([str(EXTERNAL), str(REPO)])
            env = {
                **os.environ,
                "PYTHONPATH": path,
                "CACHELIMIT_PEER_MODE": mode,
                "HF_HUB_OFFLINE": "1",
                **environment,
            }
            command = [sys.executable, "-m", "pytest", "-p", "peer_plugin", "-p", "no:cacheprovider", "-p", "no:xdist"]
            command += ["-q", f"--junitxml={root / 'out.xml'}", plan.suite_file("llama")]
            done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
            found = runner.outcomes(root / "out.xml") if (root / "out.xml").exists() else {}
        return {test.split("::")[-1]: outcome for test, outcome in found.items()}, done.stdout + done.stderr

    def test_each_list_marks_what_it_names(self):
        expected = {
            "test_plain": "passed",
            "test_returns_a_function": "failed",  # checked nothing: never a pass
            "test_prompt_lookup_decoding_matches_greedy_search": "xfailed",  # VACUOUS
            "test_listed": "xfailed",  # BASELINE
            "test_listed_passes": "failed",  # BASELINE entry that passes: XPASS(strict)
            "test_greedy_generate_dict_outputs_use_cache": "passed",  # SKIPS: bounded modes only
            "test_generate_cut_changes_it": "failed",  # CUT: limit-cut only
            "test_marked_decoding": "passed",
            "test_text_kept": "passed",  # test_image_only: deselected in every mode (its class tests LlamaModel only)
        }
        self.assertEqual(self.outcomes("unpatched"), expected)
        expected["test_greedy_generate_dict_outputs_use_cache"] = "skipped"
        self.assertEqual(self.outcomes("limit"), expected)
        expected["test_generate_cut_changes_it"] = "skipped"
        self.assertEqual(self.outcomes("limit-cut", CACHELIMIT_PEER_CUT_TESTS="all"), expected)
        generation = (
            "test_greedy_generate_dict_outputs_use_cache",
            "test_generate_cut_changes_it",
            "test_marked_decoding",
        )
        self.assertEqual(
            self.outcomes("limit-cut"), {name: expected[name] for name in generation}
        )  # the others: limit's

    def test_a_cross_path_test_named_away_is_refused(self):
        found, output = self.run_fake("limit-cut", FAKE_CROSS_PATH_NAMED_AWAY="1")
        self.assertEqual(found, {})  # nothing ran
        self.assertIn("test_generate_cut_changes_it is a cross-path test (required to pass) and named in", output)
