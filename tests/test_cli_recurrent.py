"""`cachelimit chat` on every model with recurrent layers: each turn after the first reads its new text after the
cache in one forward, which a model whose recurrent layers restart their state there would compute wrongly.

Such a model is refused before the first message, in one line naming the reason, with no traceback and no answer;
a model whose layers carry their state chats as any other (two turns answered). Which is which is read from the
model itself (`tests.common.multi_token_refusal`, the probe `tests/recurrent_mixin.py` checks against transformers'
own runs of every recurrent family). The families are the registry's (their test declarations), never listed here.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
import unittest
from pathlib import Path

import torch
from parameterized import parameterized

from cachelimit.cli import main as cli
from cachelimit.cli.tiny_model import build_tokenizer
from cachelimit.families.table import SERVED_TYPES
from tests.common import multi_token_refusal, not_served_here, tiny_config
from tests.declarations import declared_tests
from tests.recurrent_mixin import RecurrentOracleMixin

RECURRENT = sorted(name for name, test in declared_tests().items() if issubclass(test, RecurrentOracleMixin))
MESSAGES = "hello there\nand a second turn\n"


def chat(directory: str, *flags: str) -> tuple[int, str, str]:
    """`cachelimit chat DIRECTORY FLAGS` in this process, with MESSAGES on stdin: (exit status, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO(MESSAGES)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = cli.main(["chat", directory, "--max-new-tokens", "3", *flags])
    finally:
        sys.stdin = stdin
    return code, stdout.getvalue(), stderr.getvalue()


class RecurrentChatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def saved(self, family: str):
        """A tiny seeded model of `family` with the built-in byte tokenizer, saved as a user's local model."""
        tokenizer = build_tokenizer()
        torch.manual_seed(0)
        config = tiny_config(family, vocab_size=len(tokenizer), initializer_range=0.1)
        model = SERVED_TYPES[family].model_classes[0](config).eval()
        model.generation_config.eos_token_id = None  # never stops early: every answer is --max-new-tokens long
        directory = Path(self.tmp.name) / family
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        return model, str(directory)

    @parameterized.expand([(family, flags) for family in RECURRENT for flags in ((), ("--cache-limit", "16"))])
    def test_chat_refuses_in_one_line_or_answers_every_turn(self, family, flags):
        reason = not_served_here(family)
        if reason is not None:
            self.skipTest(reason)
        model, directory = self.saved(family)
        refusal = multi_token_refusal(model)
        code, stdout, stderr = chat(directory, *flags)
        if refusal is not None:  # before the first message: no answer, one line with the reason
            self.assertEqual(code, 2, stderr)
            self.assertNotIn("Traceback", stderr)
            lines = stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, stderr)
            self.assertRegex(lines[0], rf"^cachelimit: error: .*{refusal}")
            self.assertEqual(stdout, "")
        else:
            self.assertEqual(code, 0, stderr)
            self.assertNotIn("error", stderr)
            for turn in (1, 2):
                self.assertRegex(stderr, rf"\[cachelimit\] turn {turn} \| [\d,]+ tokens \(\+3\)")
            self.assertIsNotNone(re.search(r"chat ended after 2 turns", stderr))
