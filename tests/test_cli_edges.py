"""Command-line edges: how an integer flag may be spelt, the largest values, and devices that cannot generate.

Every integer flag takes plain ASCII decimal digits (an optional leading `-`, so that a negative value gets the
range error): Python's `int()` also reads " 5", "1_000", "+5" and the digits of other scripts ("٥", "５"), which a
shell script or a copy-paste can carry in unseen. Each is refused with one line naming the flag, exit status 2,
before any model work (the command is replaced by one that fails the test if it runs).
"""

from __future__ import annotations

import unittest
from unittest import mock

import pytest
from parameterized import parameterized

from cachelimit.cli import main as cli
from cachelimit.core.policy import MAX_CACHE_LIMIT

from .cli_helpers import FailureMixin, run_in_process

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

# (flag, command, a valid value, the smallest valid value)
INTEGER_FLAGS = [
    ("--cache-limit", "generate", "5", 1),
    ("--sinks", "generate", "1", 0),
    ("--max-new-tokens", "generate", "5", 1),
    ("--prefill-chunk-size", "generate", "5", 1),
    ("--seed", "generate", "5", 0),
    ("--tokens", "demo", "5", 1),
    ("--cache-limit", "demo", "5", 1),
    ("--sinks", "demo", "1", 0),
]
OTHER_SCRIPTS = {"arabic_indic": "٠١٢٣٤٥٦٧٨٩", "fullwidth": "０１２３４５６７８９", "devanagari": "०१२३४५६७८९"}
SPELLINGS = {  # how a valid value can be spelt that Python's int() reads and the command line refuses
    "leading_space": " {}",
    "trailing_space": "{} ",
    "tab": "\t{}",
    "newline": "{}\n",
    "underscore": "1_00{}",
    "plus_sign": "+{}",
    **{f"{script}_digits": script for script in OTHER_SCRIPTS},
}
NOT_NUMBERS = {"decimal_point": "{}.0", "exponent": "{}e0", "hexadecimal": "0x{}", "empty": ""}


def spelling(value: str, name: str) -> str:
    template = {**SPELLINGS, **NOT_NUMBERS}[name]
    if template in OTHER_SCRIPTS:
        return value.translate(str.maketrans("0123456789", OTHER_SCRIPTS[template]))
    return template.format(value)


def argv_for(command: str, flag: str, value: str) -> list[str]:
    """The command line with `flag value`, plus what the other flags need to be valid (`--sinks` needs a limit)."""
    extra = ["--cache-limit", "8"] if flag == "--sinks" else []
    if command == "demo":
        extra += ["--model", "tiny"]
    return [command, *extra, f"{flag}={value}"]


CASES = [
    (f"{command}_{flag.strip('-')}_{name}", command, flag, value, name)
    for flag, command, value, _ in INTEGER_FLAGS
    for name in [*SPELLINGS, *NOT_NUMBERS]
]


class RefusedMixin(FailureMixin):
    def refused(self, argv: list[str], *fragments: str) -> str:
        """One line, exit status 2, and the command never ran."""
        with mock.patch.object(cli.importlib, "import_module", side_effect=AssertionError("the command ran")):
            result = run_in_process(argv)
        self.assertEqual(result.stdout, "")
        return self.assert_one_line_failure(result, 2, *fragments)


class TestIntegerSpellings(RefusedMixin, unittest.TestCase):
    @parameterized.expand(CASES)
    def test_refused(self, _, command, flag, value, name):
        text = spelling(value, name)
        line = self.refused(argv_for(command, flag, text), f"argument {flag}: must be an int", f"got {ascii(text)}")
        self.assertIn("written in ASCII digits 0-9", line)

    @parameterized.expand(list(SPELLINGS))
    def test_python_int_would_read_it(self, name):
        """Why the spellings are refused rather than read: each is the valid value 100 or 5 to `int()`."""
        self.assertIn(int(spelling("5", name)), (5, 1005))

    @parameterized.expand(
        [(f"{command}_{flag.strip('-')}", command, flag, value) for flag, command, value, _ in INTEGER_FLAGS]
    )
    def test_plain_digits_are_read(self, _, command, flag, value):
        args = cli.build_parser().parse_args(argv_for(command, flag, value))
        self.assertEqual(getattr(args, flag.strip("-").replace("-", "_")), int(value))

    @parameterized.expand(
        [(f"{command}_{flag.strip('-')}", command, flag, minimum) for flag, command, _, minimum in INTEGER_FLAGS]
    )
    def test_below_the_minimum_gets_the_range(self, _, command, flag, minimum):
        self.refused(
            argv_for(command, flag, str(minimum - 1)), f"argument {flag}: must be an int", f"got {minimum - 1}"
        )

    def test_a_number_too_long_for_int_is_out_of_range_not_a_crash(self):
        """Python refuses to convert more than 4,300 digits (a ValueError of its own); the echo stays short."""
        line = self.refused(
            ["generate", "--max-new-tokens", "9" * 5000], "argument --max-new-tokens: must be an int in"
        )
        self.assertLess(len(line), 300)

    def test_leading_zeros_are_plain_digits(self):
        self.assertEqual(cli.build_parser().parse_args(["generate", "--cache-limit", "0064"]).cache_limit, 64)


class TestLargest(RefusedMixin, unittest.TestCase):
    """Counts of tokens stop at 2^62 (`MAX_CACHE_LIMIT`): beyond, a count and a prompt length summed in torch's
    int64 could overflow (`generate(prefill_chunk_size=2**63)` fails with "Overflow when unpacking long long")."""

    @parameterized.expand(
        [
            ("max_new_tokens", ["generate"], "--max-new-tokens"),
            ("prefill_chunk_size", ["generate"], "--prefill-chunk-size"),
            ("demo_tokens", ["demo", "--model", "tiny"], "--tokens"),
        ]
    )
    def test_bounded(self, _, command, flag):
        args = cli.build_parser().parse_args([*command, flag, str(MAX_CACHE_LIMIT)])
        self.assertEqual(getattr(args, flag.strip("-").replace("-", "_")), MAX_CACHE_LIMIT)
        for value in (MAX_CACHE_LIMIT + 1, 99999999999999999999999):
            self.refused([*command, flag, str(value)], f"argument {flag}: must be an int in [1, {MAX_CACHE_LIMIT}]")


class TestDevices(FailureMixin, unittest.TestCase):
    """A device torch can name but not compute on here is refused before the model is built or loaded."""

    @parameterized.expand(
        [
            ("meta", "meta", "holds no data"),
            ("not_built_in", "xpu", "cannot compute on 'xpu' here"),
            ("backend_without_kernels", "mps", "cannot compute on 'mps' here"),
            ("unknown", "bogus", "argument --device:"),
        ]
    )
    def test_refused(self, _, device, fragment):
        import torch

        if device != "meta" and device != "bogus" and _works(torch, device):
            self.skipTest(f"this machine computes on {device}")
        with mock.patch(
            "cachelimit.cli.generate_command.build_tiny_model", side_effect=AssertionError("the model was built")
        ):
            result = run_in_process(["generate", "--device", device, "--max-new-tokens", "2"])
        line = self.assert_one_line_failure(result, 2, "cachelimit generate: error: argument --device:", fragment)
        self.assertLess(len(line), 300)

    def test_the_chat_names_itself(self):
        result = run_in_process(["chat", "--device", "meta"])
        self.assert_one_line_failure(result, 2, "cachelimit chat: error: argument --device:", "holds no data")

    def test_cpu_generates(self):
        result = run_in_process(["generate", "--device", "cpu", "--max-new-tokens", "2"])
        self.assertEqual(result.returncode, 0, result.stderr)


def _works(torch, device: str) -> bool:
    try:
        torch.ones(1, device=device).add(1).item()
    except Exception:
        return False
    return True
