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

from transformers import DynamicCache, GenerationConfig

import cachelimit
from cachelimit import BoundedCache

from .cli_helpers import REPO
from .common import build_tiny_model, given_cache, left_padded_batch
from .peer_helpers import EXTERNAL, external
from .registry_helpers import seen_caches

SUITE = REPO.parent / "shared" / "peer-suite" / "transformers-tests"


plugin, plan, reasons = external("peer_plugin"), external("peer_plan"), external("peer_reasons")
runner = external("run_peer_suite")


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
            self.assertEqual(plugin.CALLS, {"llama": [1, 1]})  # counted: a limit run that bounds nothing fails
        self.assertIsInstance(cache, BoundedCache)
        self.assertEqual(cache.policy.limit, plugin.LIMIT)

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

    @unittest.skipUnless(SUITE.is_dir(), f"transformers' test suite is not at {SUITE} on this machine")
    def test_entries_name_tests_of_the_suite(self):
        mixins = [*SUITE.glob("tests/*.py"), *SUITE.glob("tests/generation/*.py")]
        defined = set(re.findall(r"def (test_\w+)\(", "".join(path.read_text(encoding="utf-8") for path in mixins)))
        self.assertLessEqual({*reasons.SKIPS, *reasons.VACUOUS}, defined)
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

class FakeModelTest(unittest.TestCase):
    def test_plain(self): pass
    def test_returns_a_function(self): return lambda: None
    def test_prompt_lookup_decoding_matches_greedy_search(self): return lambda: None
    def test_listed(self): raise AssertionError("the snapshot's own failure")
    def test_listed_passes(self): pass
    def test_greedy_generate_dict_outputs_use_cache(self): pass
"""
FAKE_CONFTEST = """
import peer_reasons

peer_reasons.BASELINE["llama"] = {"test_listed": "fails unpatched", "test_listed_passes": "stale entry"}
"""


class PluginRunTest(unittest.TestCase):
    """The plugin in a real pytest run of a fake model file: what each list does to a test's outcome."""

    def outcomes(self, mode):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "conftest.py").write_text(FAKE_CONFTEST)
            fake_suite(root, ["llama"])
            (root / plan.suite_file("llama")).write_text(FAKE_FILE)
            path = os.pathsep.join([str(EXTERNAL), str(REPO)])
            env = {**os.environ, "PYTHONPATH": path, "CACHELIMIT_PEER_MODE": mode, "HF_HUB_OFFLINE": "1"}
            command = [sys.executable, "-m", "pytest", "-p", "peer_plugin", "-p", "no:cacheprovider", "-p", "no:xdist"]
            command += ["-q", f"--junitxml={root / 'out.xml'}", plan.suite_file("llama")]
            subprocess.run(command, cwd=root, env=env, capture_output=True, timeout=300)
            found = runner.outcomes(root / "out.xml")
        return {test.split("::")[-1]: outcome for test, outcome in found.items()}

    def test_each_list_marks_what_it_names(self):
        expected = {
            "test_plain": "passed",
            "test_returns_a_function": "failed",  # checked nothing: never a pass
            "test_prompt_lookup_decoding_matches_greedy_search": "xfailed",  # VACUOUS
            "test_listed": "xfailed",  # BASELINE
            "test_listed_passes": "failed",  # BASELINE entry that passes: XPASS(strict)
            "test_greedy_generate_dict_outputs_use_cache": "passed",  # SKIPS: limit mode only
        }
        self.assertEqual(self.outcomes("unpatched"), expected)
        expected["test_greedy_generate_dict_outputs_use_cache"] = "skipped"
        self.assertEqual(self.outcomes("limit"), expected)


class DiscoveryTest(unittest.TestCase):
    def test_every_served_family_with_a_file_runs(self):
        served = cachelimit.supported_families()
        self.assertEqual(plan.served_families(), served)
        with tempfile.TemporaryDirectory() as tmp:
            suite = fake_suite(Path(tmp), [*served, "bloom"])
            self.assertEqual(plan.discover(suite, served, {}).runnable, sorted(served))

    def test_missing_and_set_aside_are_listed_not_dropped(self):
        with tempfile.TemporaryDirectory() as tmp:
            suite = fake_suite(Path(tmp), ["gpt2", "llama", "olmo3"])
            found = plan.discover(suite, ["olmo3", "llama", "gpt2", "gemma"], {"olmo3": "does not collect"})
        self.assertEqual(
            (found.runnable, found.missing, found.set_aside),
            (["gpt2", "llama"], ["gemma"], {"olmo3": "does not collect"}),
        )
        lines = "\n".join(found.lines())
        self.assertIn("in the suite, not run: gemma", lines)
        self.assertIn("olmo3: does not collect", lines)

    def test_models_refused_when_they_would_check_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            suite = fake_suite(Path(tmp), ["gpt2", "llama", "olmo3", "bloom"])
            found = plan.discover(suite, ["gpt2", "llama", "olmo3", "gemma"], {"olmo3": "does not collect"})
            choose = runner.choose
            served = ["gpt2", "llama", "olmo3", "gemma"]
            self.assertEqual(choose(None, found, served, ["limit"], suite), ["gpt2", "llama"])
            self.assertEqual(choose("llama", found, served, ["limit"], suite), ["llama"])
            self.assertEqual(choose("bloom", found, served, ["unpatched"], suite), ["bloom"])
            for models, pattern in [
                ("gemma", "no tests/models/gemma"),
                ("olmo3", "set aside: does not collect"),
                ("bloom", "not served"),
                ("nope", "neither served nor in the suite"),
            ]:
                with self.assertRaisesRegex(SystemExit, pattern):
                    choose(models, found, served, ["unpatched", "limit"], suite)


class ChecksTest(unittest.TestCase):
    def test_outcomes_read_xfail_apart_from_skips(self):
        xml = """<testsuites><testsuite>
            <testcase classname="c" name="test_a"/>
            <testcase classname="c" name="test_b"><failure message="boom"/></testcase>
            <testcase classname="c" name="test_c"><skipped type="pytest.skip" message="flash"/></testcase>
            <testcase classname="c" name="test_d"><skipped type="pytest.xfail" message="baseline"/></testcase>
            <testcase classname="c" name="test_e"><error message="setup"/></testcase>
        </testsuite></testsuites>"""
        with tempfile.TemporaryDirectory() as tmp:
            junit = Path(tmp) / "out.xml"
            junit.write_text(xml)
            found = runner.outcomes(junit)
        expected = {
            "test_a": "passed",
            "test_b": "failed",
            "test_c": "skipped",
            "test_d": "xfailed",
            "test_e": "error",
        }
        self.assertEqual(found, {f"c::{name}": kind for name, kind in expected.items()})

    def test_outcomes_go_to_the_file_they_come_from(self):
        self.assertEqual(
            runner.family_of("tests.models.gpt_neox.test_modeling_gpt_neox.GPTNeoXModelTest::test_a"), "gpt_neox"
        )
        self.assertEqual(runner.family_of("::tests.models.olmo3.test_modeling_olmo3"), "olmo3")  # collection error
        self.assertEqual(runner.family_of("conftest::test_a"), "?")
        self.assertEqual(plan.suite_file("gemma4_text"), "tests/models/gemma4/test_modeling_gemma4.py")

    def test_calls_are_summed_over_the_workers(self):
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "gw0.json").write_text('{"llama": [3, 1], "gpt2": [2, 0]}')
            Path(tmp, "gw1.json").write_text('{"llama": [4, 0]}')
            self.assertEqual(runner.read_calls(Path(tmp)), {"llama": [7, 1], "gpt2": [2, 0]})

    def test_any_failure_or_difference_fails_the_run(self):
        good = {"t::a": "passed", "t::b": "xfailed", "t::c": "skipped"}
        self.assertTrue(runner.checks({("gpt2", "unpatched"): good, ("gpt2", "patched"): dict(good)})[1])
        self.assertTrue(runner.checks({("gpt2", "limit"): good}, {"gpt2": [3, 1]})[1])
        self.assertFalse(runner.checks({("gpt2", "limit"): good}, {"gpt2": [0, 4], "llama": [3, 0]})[1])
        for results in [
            {("gpt2", "limit"): {**good, "t::d": "failed"}},  # (b)
            {("gpt2", "unpatched"): {**good, "t::d": "error"}},  # a baseline failure without a reason
            {("gpt2", "unpatched"): good, ("gpt2", "patched"): {**good, "t::c": "passed"}},  # (a)
            {("gpt2", "limit"): {"t::c": "skipped"}},  # nothing passed: nothing was checked
        ]:
            lines, ok = runner.checks(results)
            self.assertFalse(ok, lines)

    def test_named_lists_are_printed_with_their_reasons(self):
        with mock.patch.dict(reasons.BASELINE, {"llama": {"test_x": "the snapshot's own reason"}}):
            lines = "\n".join(runner.named_lists(["gpt2", "llama"], ["limit"]))
        for name, reason in [*reasons.SKIPS.items(), *reasons.VACUOUS.items()]:
            self.assertIn(f"{name}: {reason}", lines)
        self.assertIn("llama: test_x: the snapshot's own reason", lines)
