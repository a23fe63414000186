"""The command line, driven as users drive it: `python -m cachelimit ...` in a subprocess (see cli_helpers).

Argument checks that stop before any model work also run in-process (`main` returns the exit status), which
keeps the many bad-flag cases fast; representative ones run as processes too.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import types
import unittest
from pathlib import Path

import pytest
from parameterized import parameterized

from cachelimit import supported_families
from cachelimit.cli import main as cli
from cachelimit.cli.tiny_model import build_tiny_model, build_tokenizer

from .cli_helpers import (
    STATUS_BYTES,
    FailureMixin,
    bounded_bytes,
    prompt_length,
    run_cli,
    run_cli_concurrently,
    run_in_process,
    unbounded_bytes,
)

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

HELP = [
    ("top", [], ["generate", "demo", "families", "bench"]),
    ("generate", ["generate"], ["MODEL", "--prompt", "--max-new-tokens", "--cache-limit", "--sinks",
                                "--prefill-chunk-size", "--dtype", "--seed", "--sample", "--greedy",
                                "examples:", "cachelimit generate smollm2", "`cachelimit families`"]),
    ("chat", ["chat"], ["MODEL", "--max-new-tokens", "--cache-limit", "examples:", "cachelimit chat smollm2"]),
    ("families", ["families"], ["usage: cachelimit families"]),
    ("demo", ["demo"], ["--tokens", "--cache-limit", "--sinks", "--out"]),
    ("bench", ["bench"], ["usage: cachelimit bench", "--quick", "--out"]),
]  # fmt: skip


class TestHelp(unittest.TestCase):
    """`--help` of the program and of `bench` (another module's parser) as processes; the rest in-process."""

    @classmethod
    def setUpClass(cls):
        cls.results = run_cli_concurrently({name: [*command, "--help"] for name, command, _ in HELP[::3]})

    @parameterized.expand(HELP)
    def test_help(self, name, command, expected):
        result = self.results[name] if name in self.results else run_in_process([*command, "--help"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        self.assertIn("usage:", result.stdout)
        text = re.sub(r"-\n\s+", "-", result.stdout)  # argparse wraps at hyphens (`modernbert-decoder`)
        for fragment in expected:
            self.assertIn(fragment, text)


COUNTS = f"[1, {2**62}]"  # docs/cli.md: every count of tokens or positions stops at 2^62
BAD_FLAGS = [
    ("limit_zero", ["generate", "--cache-limit", "0"], f"argument --cache-limit: must be an int in {COUNTS}, got 0"),
    ("limit_negative", ["generate", "--cache-limit", "-3"], f"argument --cache-limit: must be an int in {COUNTS}, got -3"),
    ("limit_text", ["generate", "--cache-limit", "abc"], f"argument --cache-limit: must be an int in {COUNTS} written in ASCII digits 0-9, got 'abc'"),
    ("sinks_at_limit", ["generate", "--cache-limit", "4", "--sinks", "4"], "--sinks: must be an int in [0, 3]"),
    ("sinks_negative", ["generate", "--cache-limit", "4", "--sinks", "-1"], f"--sinks: must be an int in [0, {2**62 - 1}], got -1"),
    ("sinks_unbounded", ["generate", "--sinks", "2"], "--sinks: needs --cache-limit"),
    ("dtype", ["generate", "--dtype", "bogus"], "argument --dtype: invalid choice: 'bogus'"),
    ("new_tokens", ["generate", "--max-new-tokens", "0"], f"argument --max-new-tokens: must be an int in {COUNTS}, got 0"),
    ("chunk", ["generate", "--prefill-chunk-size", "x"], f"argument --prefill-chunk-size: must be an int in {COUNTS}"),
    ("empty_prompt", ["generate", "--prompt", ""], "argument --prompt: must not be empty"),
    ("sample_and_greedy", ["generate", "--sample", "--greedy"], "not allowed with argument"),
    ("demo_tokens", ["demo", "--tokens", "0"], f"argument --tokens: must be an int in {COUNTS}, got 0"),
    ("demo_sinks", ["demo", "--cache-limit", "8", "--sinks", "9"], "--sinks: must be an int in [0, 7]"),
    ("no_command", [], "required: COMMAND"),
    # an unknown flag after a subcommand is that subcommand's error (argparse leaves it to the top-level parser)
    ("chat_prompt", ["chat", "smollm2", "--prompt", "hi"],
     "cachelimit chat: error: unrecognized arguments: --prompt hi; --prompt is a flag of `cachelimit generate` "
     "(see `cachelimit chat --help`)"),
    ("generate_unknown", ["generate", "--bogus"], "unrecognized arguments: --bogus (see `cachelimit generate --help`)"),
    ("demo_unknown", ["demo", "--sample"],
     "cachelimit demo: error: unrecognized arguments: --sample; --sample is a flag of `cachelimit generate`, "
     "`cachelimit chat` (see `cachelimit demo --help`)"),
    ("families_extra", ["families", "llama"], "cachelimit families: error: unrecognized arguments: llama"),
    ("unknown_command", ["serve"], "invalid choice: 'serve'"),
]  # fmt: skip


class TestShortHelp(unittest.TestCase):
    def test_generate_help_is_short_and_lists_no_families(self):
        text = run_in_process(["generate", "--help"]).stdout
        self.assertLessEqual(len(text.splitlines()), 45, text)  # 55 before the families moved out (issue 26)
        listed = [name for name in supported_families() if re.search(rf"\b{re.escape(name)}\b", text)]
        self.assertLessEqual(len(listed), 2, listed)  # an example may name one (gpt2); the list is `families`

    def test_families_lists_every_served_family_at_once(self):
        result = run_in_process(["families"])
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        self.assertEqual(result.stdout.split(), supported_families())


class TestBadFlags(FailureMixin, unittest.TestCase):
    @parameterized.expand(BAD_FLAGS)
    def test_in_process(self, _, argv, fragment):
        result = run_in_process(argv)
        line = self.assert_one_line_failure(result, 2, fragment)
        self.assertEqual(result.stdout, "")
        command = argv[0] if argv and argv[0] in ("generate", "chat", "demo", "families") else None
        self.assertTrue(line.startswith(f"cachelimit {command}: error: " if command else "cachelimit: error: "), line)

    def test_bench_bad_flag_is_one_line(self):
        result = run_cli("bench", "--bogus")
        self.assert_one_line_failure(result, 2, "unrecognized arguments: --bogus")
        self.assertEqual(result.stdout, "")

    def test_as_process(self):
        _, argv, fragment = BAD_FLAGS[2]
        result = run_cli(*argv)
        self.assert_one_line_failure(result, 2, fragment)
        self.assertEqual(result.stdout, "")


class TestLoadFailures(FailureMixin, unittest.TestCase):
    """Models that cannot be used: one line naming the model, exit status 1 (2 for a run cachelimit refuses)."""

    HUB_NAME = "cachelimit-test-org/no-such-model"

    @classmethod
    def setUpClass(cls):
        import torch
        from transformers import BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel

        cls.tmp = tempfile.TemporaryDirectory()
        root = Path(cls.tmp.name)
        tokenizer = build_tokenizer()
        torch.manual_seed(0)
        for name, model in [
            ("bloom", BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=16, n_layer=1, n_head=2))),
            ("gpt2", GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2,
                                                n_positions=32))),
        ]:  # fmt: skip
            model.save_pretrained(root / name)
            tokenizer.save_pretrained(root / name)
        (root / "empty").mkdir()
        cls.root = root
        gpt2 = ["generate", str(root / "gpt2"), "--prompt", "hi", "--max-new-tokens", "40"]
        cls.results = run_cli_concurrently(
            {
                "bloom": ["generate", str(root / "bloom"), "--max-new-tokens", "2"],
                "hub": ["generate", cls.HUB_NAME, "--max-new-tokens", "2"],
                "gpt2": gpt2,
                "gpt2_bounded": [*gpt2, "--cache-limit", "8"],
            }
        )

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_unknown_local_path(self):
        result = run_in_process(["generate", str(self.root / "no" / "such" / "model")])
        self.assert_one_line_failure(result, 1, "could not load", "no such directory")

    def test_directory_without_model(self):
        result = run_in_process(["generate", str(self.root / "empty")])
        self.assert_one_line_failure(result, 1, "could not load", "no config.json")

    def test_file_instead_of_directory(self):
        result = run_in_process(["generate", str(self.root / "gpt2" / "config.json")])
        self.assert_one_line_failure(result, 1, "could not load", "it is a file")

    def test_unsupported_family(self):
        from cachelimit.families.refusals import REFUSALS

        self.assert_one_line_failure(self.results["bloom"], 1, "model_type 'bloom'", REFUSALS["bloom"])

    def test_hub_name_offline(self):
        expected = f"could not load {self.HUB_NAME!r}: not a local path and it could not be downloaded (offline?)"
        self.assert_one_line_failure(self.results["hub"], 1, expected)

    def test_run_longer_than_learned_positions(self):
        """An unbounded GPT-2 run past n_positions=32 would fail mid-run in transformers; refused up front."""
        self.assert_one_line_failure(self.results["gpt2"], 2, "n_positions=32")
        self.assertEqual(self.results["gpt2"].stdout, "")

    def test_bounded_run_refused_by_cachelimit(self):
        """cachelimit's own check inside `generate` (before any token): its ValueError, as one line."""
        self.assert_one_line_failure(self.results["gpt2_bounded"], 2, "cachelimit: error: GPT-2", "n_positions=32")
        self.assertEqual(self.results["gpt2_bounded"].stdout, "")


class TestGenerate(unittest.TestCase):
    PROMPT = "Hello, cache: ünïcode too"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        model, tokenizer = build_tiny_model()
        model.save_pretrained(cls.tmp.name)
        tokenizer.save_pretrained(cls.tmp.name)
        prompt = ["--prompt", cls.PROMPT]
        cls.results = run_cli_concurrently(
            {
                "sinks": ["generate", *prompt, "--max-new-tokens", "48", "--cache-limit", "16", "--sinks", "3"],
                "unbounded": ["generate", *prompt, "--max-new-tokens", "30", "--dtype", "bfloat16", "--sample"],
                "float16": ["generate", *prompt, "--max-new-tokens", "24", "--dtype", "float16", "--cache-limit", "16",
                            "--sinks", "3"],
                "directory": ["generate", cls.tmp.name, *prompt, "--max-new-tokens", "20", "--cache-limit", "8",
                              "--prefill-chunk-size", "5"],
            }
        )  # fmt: skip

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def final_status(self, stderr: str) -> tuple[int, int]:
        """(tokens, KV bytes) of the last status line (updates are separated by '\\r')."""
        last = re.split(r"[\r\n]+", stderr.strip())[-1]
        match = STATUS_BYTES.search(last)
        self.assertIsNotNone(match, stderr)
        return int(match.group(1).replace(",", "")), int(match.group(2).replace(",", ""))

    def check_run(self, name: str, new_tokens: int, expected_bytes: int) -> subprocess.CompletedProcess:
        result = self.results[name]
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertTrue(result.stdout.startswith(self.PROMPT), result.stdout)
        self.assertEqual(self.final_status(result.stderr), (new_tokens, expected_bytes))
        self.assertGreater(result.stderr.count("\r"), 0)  # live updates in place
        return result

    def test_bounded_tiny_model_with_sinks(self):
        result = self.check_run("sinks", 48, bounded_bytes(16, 3))
        self.assertIn("random weights: the text is noise", result.stderr.splitlines()[0])
        # The tiny model emits printable ASCII and newlines only: 48 tokens are 48 characters, then a newline
        # ends the text unless it already ends with one.
        text = result.stdout[len(self.PROMPT) : len(self.PROMPT) + 48]
        self.assertEqual(result.stdout, self.PROMPT + text + ("" if text.endswith("\n") else "\n"))
        self.assertTrue(all(char == "\n" or " " <= char <= "~" for char in text), repr(text))

    def test_bounded_tiny_model_float16(self):
        """float16 is accepted (CPU computes it; docs/cli.md, "--dtype"): half the bytes of the float32 cache."""
        self.check_run("float16", 24, bounded_bytes(16, 3) // 2)

    def test_unbounded_tiny_model_bfloat16_sampled(self):
        # The last forward reads the prompt and all generated tokens but the last one, 2 bytes per number.
        self.check_run("unbounded", 30, unbounded_bytes(prompt_length(self.PROMPT) + 30 - 1, element_size=2))

    def test_local_model_directory_with_chunked_prefill(self):
        """A saved model loaded by path (AutoModelForCausalLM + AutoTokenizer); a window without sinks."""
        result = self.check_run("directory", 20, bounded_bytes(8, 0))
        self.assertNotIn("random weights", result.stderr)


class TestBenchForwarding(unittest.TestCase):
    """`bench` hands every argument, --help included, to `cachelimit.bench.sweep.main` and returns its status."""

    def run_with_fake_benchmark(self, argv, behaviour):
        calls = []

        def main(arguments):
            calls.append(arguments)
            return behaviour(arguments)

        fake = types.ModuleType("cachelimit.bench.sweep")
        fake.main = main
        saved = sys.modules.get("cachelimit.bench.sweep")
        sys.modules["cachelimit.bench.sweep"] = fake
        try:
            return cli.main(argv), calls
        finally:
            if saved is None:
                del sys.modules["cachelimit.bench.sweep"]
            else:
                sys.modules["cachelimit.bench.sweep"] = saved

    def test_arguments_and_status_pass_through(self):
        code, calls = self.run_with_fake_benchmark(["bench", "--quick", "--out", "x", "--help"], lambda _: 3)
        self.assertEqual(calls, [["--quick", "--out", "x", "--help"]])
        self.assertEqual(code, 3)

    def test_exit_of_its_parser_keeps_its_status(self):
        def exits(_):
            raise SystemExit(2)

        self.assertEqual(self.run_with_fake_benchmark(["bench", "--bogus"], exits)[0], 2)
