"""`cachelimit demo` (table, plot, JSON), the status line on a real terminal, and the built-in tiny model."""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import pytest
from parameterized import parameterized

from cachelimit.cli.tiny_model import build_tiny_model, build_tokenizer, printable_token_ids

from .cli_helpers import (
    FLOAT32,
    REPO,
    STATUS_BYTES,
    TABLE_ROW,
    bounded_bytes,
    prompt_length,
    run_cli,
    tiny_kv_shape,
    unbounded_bytes,
)

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


class TestDemo(unittest.TestCase):
    TOKENS, LIMIT, SINKS = 150, 32, 2

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = Path(cls.tmp.name) / "out"
        argv = [
            "--model",
            "tiny",
            "--tokens",
            str(cls.TOKENS),
            "--cache-limit",
            str(cls.LIMIT),
            "--sinks",
            str(cls.SINKS),
        ]
        cls.result = run_cli("demo", *argv, "--out", str(cls.out))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.assertNotIn("Traceback", self.result.stderr)

    def test_table_shows_the_bounded_cache_flat_and_smaller(self):
        rows = [[float(cell.replace(",", "")) for cell in row] for row in TABLE_ROW.findall(self.result.stdout)]
        self.assertEqual(len(rows), 6, self.result.stdout)
        self.assertEqual(rows[-1][0], self.TOKENS)
        prompt = json.loads((self.out / "demo.json").read_text())["prompt_tokens"]
        for tokens, unbounded, unbounded_rate, bounded, bounded_rate in rows:
            self.assertLess(bounded, unbounded)
            self.assertEqual(bounded, bounded_bytes(self.LIMIT, self.SINKS))
            self.assertEqual(unbounded, unbounded_bytes(prompt + tokens - 1))
            self.assertGreater(unbounded_rate, 0)
            self.assertGreater(bounded_rate, 0)

    def test_plot_is_a_png(self):
        path = self.out / "demo_kv_memory.png"
        self.assertIn(f"plot: {path}", self.result.stdout)
        data = path.read_bytes()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertEqual(data[12:16], b"IHDR")
        width, height = struct.unpack(">II", data[16:24])
        self.assertEqual((width, height), (800, 450))
        self.assertGreater(len(data), 10_000)  # axes, two curves, labels: not a blank image

    def test_json_records_every_token(self):
        summary = json.loads((self.out / "demo.json").read_text())
        self.assertEqual(set(summary), {"model", "prompt_tokens", "new_tokens", "runs", "plot"})
        self.assertEqual(summary["prompt_tokens"], prompt_length(cli_demo_prompt()))
        self.assertEqual(summary["new_tokens"], self.TOKENS)
        layers, per_position = tiny_kv_shape()
        model = summary["model"]
        self.assertEqual(layers, model["layers"])
        self.assertEqual(per_position, model["kv_heads"] * model["head_dim"] * FLOAT32)
        unbounded, bounded = summary["runs"]
        self.assertEqual((unbounded["cache_limit"], unbounded["num_sink_tokens"]), (None, None))
        self.assertEqual((bounded["cache_limit"], bounded["num_sink_tokens"]), (self.LIMIT, self.SINKS))
        positions = [summary["prompt_tokens"] + index for index in range(self.TOKENS)]
        self.assertEqual(unbounded["kv_bytes"], [unbounded_bytes(count) for count in positions])
        self.assertEqual(bounded["kv_bytes"], [bounded_bytes(self.LIMIT, self.SINKS)] * self.TOKENS)
        for run in (unbounded, bounded):
            seconds = run["seconds"]
            self.assertEqual(len(seconds), self.TOKENS)
            self.assertGreater(seconds[0], 0)
            self.assertTrue(all(later > earlier for earlier, later in zip(seconds, seconds[1:], strict=False)))
            self.assertAlmostEqual(run["tokens_per_s"], self.TOKENS / seconds[-1])


class TestDemoGrowth(unittest.TestCase):
    """A limit above the prompt: the ring grows by doubling while the window fills, so at first the bounded cache can
    hold more bytes than the unbounded one; the demo says so, with the numbers of its own runs."""

    def test_the_note_explains_the_bounded_cache_above_the_unbounded_one(self):
        from cachelimit.cli.demo import PROMPT, _run, growth_note
        from cachelimit.families.patching import patch

        model, tokenizer = build_tiny_model()
        patch("llama")
        inputs = tokenizer(PROMPT, return_tensors="pt")
        limit, sinks, tokens = 256, 4, 40
        self.assertLess(inputs["input_ids"].shape[1] + tokens, limit)  # the window never fills here
        greedy = {"do_sample": False}
        runs = [_run(model, inputs, tokens, "unbounded", greedy)]
        runs.append(_run(model, inputs, tokens, "bounded", greedy, cache_limit=limit, num_sink_tokens=sinks))
        unbounded, bounded = runs[0]["kv_bytes"], runs[1]["kv_bytes"]
        above = [index for index in range(tokens) if bounded[index] > unbounded[index]]
        self.assertTrue(above, "the ring doubles ahead of what it holds: it must exceed the unbounded cache here")
        self.assertTrue(all(bounded[index] < 2.1 * unbounded[index] for index in range(tokens)))
        note = growth_note(runs, limit, sinks)
        self.assertIsNotNone(note)
        self.assertIn(f"from token {above[0] + 1:,} to {above[-1] + 1:,}", note)
        self.assertIn(f"the limit's {limit + 1:,} slots per layer", note)
        worst = max(above, key=lambda index: bounded[index] / unbounded[index])
        self.assertIn(f"{bounded[worst]:,} vs {unbounded[worst]:,} B", note)
        self.assertIsNone(growth_note([runs[0], runs[0]], limit, sinks))  # never above: no note

    def test_no_note_when_the_bounded_cache_is_never_larger(self):
        runs = [{"kv_bytes": [10, 20, 30]}, {"kv_bytes": [10, 20, 20]}]
        self.assertIsNone(growth_note_of(runs))


def growth_note_of(runs):
    from cachelimit.cli.demo import growth_note

    return growth_note(runs, 2, 0)


class TestDemoDependencies(unittest.TestCase):
    def test_missing_matplotlib_fails_before_any_model_work(self):
        """Checked with the arguments: one line naming what to install, no torch imported, nothing generated."""
        script = (
            "import sys\nsys.modules['matplotlib'] = None  # not installed\n"
            "from cachelimit.cli import main as cli\n"
            "code = cli.main(['demo', '--model', 'tiny', '--out', sys.argv[1]])\n"
            "print('TORCH', 'torch' in sys.modules, code, file=sys.stderr)\n"
        )
        with tempfile.TemporaryDirectory() as directory:
            result = subprocess.run(
                [sys.executable, "-c", script, directory], capture_output=True, text=True, timeout=120, cwd=REPO
            )
        lines = result.stderr.strip().splitlines()
        self.assertEqual(lines[-1], "TORCH False 1", result.stderr)
        self.assertEqual(
            lines[0],
            "cachelimit demo: error: the demo's plot needs matplotlib, which is not installed: "
            "pip install 'cachelimit[cli]' (or matplotlib)",
        )
        self.assertEqual(result.stdout, "")


def cli_demo_prompt() -> str:
    from cachelimit.cli.demo import PROMPT

    return PROMPT


@unittest.skipUnless(sys.platform != "win32", "needs a pseudo-terminal")
class TestTerminal(unittest.TestCase):
    """stdout and stderr on one terminal: the status line lives in the bottom row and never touches the text."""

    def test_status_line_pinned_below_the_text(self):
        import pty
        import select

        master, slave = pty.openpty()
        environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        environment.update(TERM="xterm", LINES="24", COLUMNS="100")
        argv = ["generate", "--prompt", "Hi", "--max-new-tokens", "40", "--cache-limit", "8"]
        process = subprocess.Popen([sys.executable, "-m", "cachelimit", *argv], stdin=slave, stdout=slave,
                                   stderr=slave, env=environment, cwd=REPO)  # fmt: skip
        os.close(slave)
        chunks = []
        deadline = time.monotonic() + 300  # start-up imports torch: slow on a loaded machine, so no idle timeout
        with contextlib.suppress(OSError):  # reading a pty whose writer has exited raises EIO
            while time.monotonic() < deadline:
                if select.select([master], [], [], 1)[0]:
                    if not (chunk := os.read(master, 65536)):
                        break
                    chunks.append(chunk)
                elif process.poll() is not None:
                    break
        os.close(master)
        self.assertEqual(process.wait(timeout=60), 0)
        screen = b"".join(chunks).decode()
        self.assertIn("\x1b[1;23r", screen)  # rows 1-23 scroll, row 24 is the status line's
        draws = re.findall(r"\x1b7\x1b\[24;1H\x1b\[2K([^\x1b]*)\x1b8", screen)
        self.assertGreater(len(draws), 0, repr(screen))
        self.assertTrue(all(draw.startswith("[cachelimit] ") for draw in draws))
        reset = screen.index("\x1b[1;24r")
        self.assertGreater(reset, screen.rindex("\x1b[24;1H\x1b[2K["))  # the region is reset after the last draw
        # Without the status draws and the region set-up, what remains is the header, the text, the last status.
        text = re.sub(r"\x1b7\x1b\[24;1H\x1b\[2K[^\x1b]*\x1b8", "", screen)
        text = text.replace("\x1b7\x1b[1;23r\x1b8\x1b[1A", "").replace("\x1b7\x1b[1;24r\x1b[24;1H\x1b[2K\x1b8", "")
        lines = text.replace("\r\n", "\n").split("\n")
        self.assertIn("random weights", lines[0])
        self.assertTrue(lines[2].startswith("Hi") and len(lines[2]) >= 2, repr(text))
        self.assertEqual(STATUS_BYTES.match(lines[-2]).group(2), f"{bounded_bytes(8, 0):,}")
        self.assertNotIn("\x1b", text)


class TestTinyModel(unittest.TestCase):
    """The built-in model's tokenizer is byte-level: ids are UTF-8 bytes (an independent reference)."""

    @parameterized.expand(
        [("ascii", "Hello, world!\n"), ("unicode", "naïve 日本語 🙂"), ("controls", "a\r\x1b[2Jb\t")]
    )
    def test_tokens_are_utf8_bytes(self, _, text):
        tokenizer = build_tokenizer()
        ids = tokenizer(text)["input_ids"]
        self.assertEqual(ids, list(text.encode("utf-8")))
        self.assertEqual(tokenizer.decode(ids), text)

    def test_emitted_tokens_are_printable(self):
        tokenizer = build_tokenizer()
        emitted = "".join(tokenizer.decode([token]) for token in printable_token_ids())
        self.assertEqual(emitted, "\n" + "".join(chr(code) for code in range(32, 127)))
        model = build_tiny_model()[0]
        suppressed = set(model.generation_config.suppress_tokens)
        self.assertEqual(suppressed | set(printable_token_ids()), set(range(model.config.vocab_size)))
        self.assertFalse(suppressed & set(printable_token_ids()))

    def test_weights_are_seeded(self):
        first, second = build_tiny_model()[0], build_tiny_model()[0]
        for (name, left), right in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
            self.assertTrue(left.equal(right), name)
