"""The external test bed's plan and checks (tests/external/): which files run in which modes (from the registry and
a fake suite: none of transformers' tests run) and that the runner's checks fail on what they must (the plugin
itself: `tests/test_peer_plugin.py`)."""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

import pytest

import cachelimit

from .test_peer_plugin import checks, fake_suite, plan, reasons, runner

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


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
            Path(tmp, "gw0.json").write_text('{"llama": [3, 1, 2], "gpt2": [2, 0, 0]}')
            Path(tmp, "gw1.json").write_text('{"llama": [4, 0, 1]}')
            self.assertEqual(runner.read_calls(Path(tmp)), {"llama": [7, 1, 3], "gpt2": [2, 0, 0]})

    def test_any_failure_or_difference_fails_the_run(self):
        good = {"t::a": "passed", "t::b": "xfailed", "t::c": "skipped"}
        self.assertTrue(checks.checks({("gpt2", "unpatched"): good, ("gpt2", "patched"): dict(good)})[1])
        self.assertTrue(checks.checks({("gpt2", "limit"): good}, {("gpt2", "limit"): [3, 1, 0]})[1])
        for calls in [{("gpt2", "limit"): [0, 4, 0], ("llama", "limit"): [3, 0, 0]}, {("gpt2", "limit"): [3, 1, 1]}]:
            self.assertFalse(checks.checks({("gpt2", "limit"): good}, calls)[1], calls)  # bounded none; one cut
        for results in [
            {("gpt2", "limit"): {**good, "t::d": "failed"}},  # (b)
            {("gpt2", "unpatched"): {**good, "t::d": "error"}},  # a baseline failure without a reason
            {("gpt2", "unpatched"): good, ("gpt2", "patched"): {**good, "t::c": "passed"}},  # (a)
            {("gpt2", "limit"): {"t::c": "skipped"}},  # nothing passed: nothing was checked
        ]:
            lines, ok = checks.checks(results)
            self.assertFalse(ok, lines)

    def test_limit_cut_needs_a_cut_and_every_cross_path_test_passing(self):
        greedy, embeds, beam = (f"t::{name}" for name in list(reasons.CROSS_PATH)[:3])
        good = {"t::a": "passed", greedy: "passed", embeds: "skipped"}  # skipped by the suite itself: allowed
        cut = {("gpt2", "limit-cut"): [3, 1, 2]}
        lines, ok = checks.checks({("gpt2", "limit-cut"): good}, cut)
        self.assertTrue(ok, lines)
        self.assertIn("(c) gpt2 limit-cut: cross-path tests 1 passed, 1 skipped by the suite, 0 not passed", lines)
        for results, calls in [
            (good, {("gpt2", "limit-cut"): [3, 1, 0]}),  # nothing cut
            ({**good, greedy: "skipped"}, cut),  # no two paths compared
            ({**good, beam: "xfailed"}, cut),  # a cross-path test named away (a BASELINE entry) is not a pass
            ({**good, beam: "failed"}, cut),
        ]:
            lines, ok = checks.checks({("gpt2", "limit-cut"): results}, calls)
            self.assertFalse(ok, lines)

    def test_named_lists_are_printed_with_their_reasons(self):
        with mock.patch.dict(reasons.BASELINE, {"llama": {"test_x": "the snapshot's own reason"}}):
            lines = "\n".join(checks.named_lists(["gpt2", "llama"], ["limit"]))
            cut = "\n".join(checks.named_lists(["gpt2"], ["limit-cut"]))
        for name, reason in [*reasons.SKIPS.items(), *reasons.VACUOUS.items()]:
            self.assertIn(f"{name}: {reason}", lines)
        for name, reason in [*reasons.SKIPS.items(), *reasons.CUT.items(), *reasons.CROSS_PATH.items()]:
            self.assertIn(f"{name}: {reason}", cut)
        self.assertNotIn(next(iter(reasons.CUT)), lines)
        self.assertIn("llama: test_x: the snapshot's own reason", lines)


class DeadlineTest(unittest.TestCase):
    def test_a_mode_past_the_deadline_is_stopped_and_said_not_run(self):
        """CI gives the test bed what is left of its time (`--deadline-min`): a mode still running then is stopped,
        pytest's whole session with it, and it and the modes after it are printed as NOT RUN, not checked."""
        with tempfile.TemporaryDirectory() as tmp:
            suite = fake_suite(Path(tmp) / "suite", ["llama"])
            (suite / plan.suite_file("llama")).write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
            argv = ["--suite", str(suite), "--models", "llama", "--modes", "unpatched,patched"]
            argv += ["--out", str(Path(tmp) / "out"), "--deadline-min", "0.05"]
            output = io.StringIO()
            started = time.monotonic()
            with contextlib.redirect_stdout(output):
                code = runner.main(argv)
            took = time.monotonic() - started
        text = output.getvalue()
        self.assertEqual(code, 0, text)
        self.assertLess(took, 30, "the sleeping test was not stopped at the deadline")
        self.assertRegex(text, r"NOT RUN \(stopped at --deadline-min, [0-9.]+ min in\): unpatched on llama")
        self.assertIn("NOT RUN (past --deadline-min 0.05): patched on llama", text)
        self.assertIn("nothing ran within --deadline-min: no check was made", text)

    def test_the_deadline_must_be_positive(self):
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(io.StringIO()) as error:
            suite = fake_suite(Path(tmp), ["llama"])
            with self.assertRaises(SystemExit):
                runner.main(["--suite", str(suite), "--deadline-min", "0"])
        self.assertIn("--deadline-min: more than 0 minutes, got 0.0", error.getvalue())
