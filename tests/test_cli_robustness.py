"""The command line under hostile conditions: absurd numbers, undecodable bytes, closed stdout, Ctrl-C at start-up
and mid-text, a model emitting terminal escapes, an output directory it cannot use; and `--help` without torch.

Whether torch was imported is read from `sys.modules` in a fresh interpreter (never a wall-clock assertion).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

import pytest
import torch
from parameterized import parameterized

from cachelimit.cli import main as cli
from cachelimit.cli.terminal import KVMeter, LiveTextStreamer, StatusLine
from cachelimit.cli.tiny_model import build_tokenizer
from cachelimit.core.policy import MAX_CACHE_LIMIT

from .cli_helpers import REPO, FailureMixin, run_in_process

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

HEAVY = ("torch", "transformers")


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


class TestNoHeavyImports(unittest.TestCase):
    """`cachelimit --help` and argument errors import neither torch nor transformers (they take seconds)."""

    @parameterized.expand(
        [
            ("help", ["--help"], 0),
            ("generate_help_usage", ["generate", "--cache-limit", "0"], 2),
            ("demo_help", ["demo", "--help"], 0),
            ("generate_help", ["generate", "--help"], 0),
            ("bad_sinks", ["generate", "--cache-limit", "4", "--sinks", "4"], 2),
        ]
    )
    def test_no_torch(self, _, argv, code):
        script = (
            "import sys\nfrom cachelimit.cli import main as cli\n"
            f"code = cli.main({argv!r})\n"
            f"print('HEAVY', [name for name in {HEAVY!r} if name in sys.modules], code, file=sys.stderr)\n"
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment())
        self.assertIn(f"HEAVY [] {code}", result.stderr)

    def test_help_lists_the_registered_families(self):
        """`generate --help` reads the family names from the module files; they must be the registered ones."""
        import cachelimit

        self.assertEqual(cli.family_names(), cachelimit.supported_families())

    def test_import_cachelimit_alone(self):
        script = f"import sys, cachelimit\nprint([name for name in {HEAVY!r} if name in sys.modules])"
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment())
        self.assertEqual(result.stdout.strip(), "[]", result.stderr)


BAD = [
    ("huge_limit", ["generate", "--cache-limit", "99999999999999999999999"], f"--cache-limit: must be an int in [1, {MAX_CACHE_LIMIT}]"),
    ("huge_seed", ["generate", "--seed", "99999999999999999999999"], "argument --seed: must be an int in [0, "),
    ("prompt_bytes", ["generate", "--prompt", b"\xff\xfe".decode("utf-8", "surrogateescape")], "argument --prompt: is not valid UTF-8"),
    ("demo_limit_below_sinks", ["demo", "--cache-limit", "3", "--sinks", "3"], "argument --sinks: must be an int in [0, 2]"),
]  # fmt: skip


class TestBadValues(FailureMixin, unittest.TestCase):
    @parameterized.expand(BAD)
    def test_one_line(self, _, argv, fragment):
        result = run_in_process(argv)
        line = self.assert_one_line_failure(result, 2, fragment)
        self.assertLess(len(line), 200)

    def test_huge_limit_as_a_process(self):
        result = subprocess.run(
            [sys.executable, "-m", "cachelimit", *BAD[0][1]], capture_output=True, text=True, env=environment()
        )
        self.assert_one_line_failure(result, 2, BAD[0][2])

    def test_demo_small_limit_without_sinks_fits_the_default_sinks(self):
        parser = cli.build_parser()
        args = parser.parse_args(["demo", "--cache-limit", "3", "--out", tempfile.mkdtemp()])
        cli.check_arguments(args.parser, args)
        self.assertEqual((args.cache_limit, args.sinks), (3, 2))
        args = parser.parse_args(["demo", "--out", tempfile.mkdtemp()])
        cli.check_arguments(args.parser, args)
        self.assertEqual((args.cache_limit, args.sinks), (256, 4))

    def test_demo_out_is_a_file_or_unwritable(self):
        with tempfile.TemporaryDirectory() as directory:
            file = Path(directory) / "taken"
            file.write_text("")
            for out, fragment in [(file, "is a file"), (file / "below", "cannot write to")]:
                with mock.patch("cachelimit.cli.demo.demo_command") as command:
                    result = run_in_process(["demo", "--out", str(out)])
                self.assert_one_line_failure(result, 2, "argument --out:", fragment)
                command.assert_not_called()


class TestProcessConditions(unittest.TestCase):
    def test_stdout_closed(self):
        result = subprocess.run(
            [sys.executable, "-m", "cachelimit", "generate", "--max-new-tokens", "2"],
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
            preexec_fn=lambda: os.close(1),
        )
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(result.stderr.strip().splitlines(), [result.stderr.strip()])
        self.assertIn("stdout is closed", result.stderr)

    def test_ctrl_c_during_start_up(self):
        # a run far longer than the test, so the signal always finds the process alive: 0.3 s after the start is
        # inside the imports of torch and transformers on every machine seen so far (0.5-2 s), and a faster
        # machine that is already generating must give the same answer
        process = subprocess.Popen(
            [sys.executable, "-m", "cachelimit", "generate", "--max-new-tokens", "1000000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(),
            # as from a terminal: a process started in the background (nohup, `cmd &` in a script) ignores SIGINT,
            # and a child inherits an ignored signal
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(0.3)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
        self.assertEqual(process.returncode, 130, stderr)
        self.assertNotIn("Traceback", stderr)
        self.assertEqual(stderr.strip().splitlines()[-1], "cachelimit: interrupted")


class TestInterruptWrapped(unittest.TestCase):
    """A Ctrl-C can reach `main` inside another error: Python 3.11 wraps one that lands while a class body is built
    (`__set_name__`, seen in the start-up test above under load) in a RuntimeError. It is still an interrupt."""

    def run_main(self, error: BaseException) -> tuple[int, str]:
        stderr = io.StringIO()
        with mock.patch.object(cli, "run", side_effect=error), contextlib.redirect_stderr(stderr):
            code = cli.main(["generate"])
        return code, stderr.getvalue()

    def test_wrapped_interrupt_is_an_interrupt(self):
        error = RuntimeError("Error calling __set_name__ on 'Field' instance")
        error.__cause__ = KeyboardInterrupt()  # what `raise ... from` sets
        code, stderr = self.run_main(error)
        self.assertEqual((code, stderr.strip()), (130, "cachelimit: interrupted"))

    def test_other_errors_stay_errors(self):
        code, stderr = self.run_main(RuntimeError("no interrupt here"))
        self.assertEqual(code, 1)
        self.assertIn("cachelimit: error: RuntimeError: no interrupt here", stderr)


class TestStreamedText(unittest.TestCase):
    def stream(self, token_ids: list[int]) -> str:
        out, err = io.StringIO(), io.StringIO()
        status = StatusLine(out=out, err=err)
        streamer = LiveTextStreamer(build_tokenizer(), status, KVMeter(None), "unbounded")
        streamer.put(torch.tensor([1]))  # the prompt
        for token in token_ids:
            streamer.put(torch.tensor([token]))
        streamer.end()
        return out.getvalue()

    def test_terminal_controls_from_a_model_are_shown_not_obeyed(self):
        text = "a\x1b[2Jb\x07c\r\x9bd\te\n"
        shown = self.stream(list(text.encode("utf-8")))
        self.assertEqual(shown, "a\\x1b[2Jb\\x07c\\x0d\\x9bd\te\n")

    def test_ctrl_c_flushes_the_text_held_back(self):
        argv = ["generate", "--prompt", "Hi", "--max-new-tokens", "30"]
        complete = _run_generate(argv)
        original = LiveTextStreamer.put

        def interrupted_after_30(streamer, value):
            original(streamer, value)
            if streamer.generated == 30:
                raise KeyboardInterrupt

        with mock.patch.object(LiveTextStreamer, "put", interrupted_after_30):
            interrupted = _run_generate([*argv[:-1], "60"])
        self.assertEqual(interrupted.returncode, 130)
        self.assertEqual(interrupted.stdout, complete.stdout)


def _run_generate(argv: list[str]) -> subprocess.CompletedProcess:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(argv)
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())
