"""Shared by the command-line tests: run `python -m cachelimit` as users do, and the expected KV sizes.

Expected KV sizes come from the model config and the documented memory layout (L + 1 slots of keys and values
per layer, plus S un-rotated sink keys for RoPE models; an unbounded cache holds every position it has read),
never from the code under test.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cachelimit.cli import main as cli
from cachelimit.cli.tiny_model import build_tiny_model, build_tokenizer

REPO = Path(__file__).resolve().parents[1]
FLOAT32 = 4
STATUS_BYTES = re.compile(r"\[cachelimit\] ([\d,]+) tokens \| [\d.]+ tok/s \| KV cache [\d.]+ [KM]iB \(([\d,]+) B\)")
TABLE_ROW = re.compile(r"^\s*([\d,]+) \|\s+([\d,]+)\s+([\d.]+) \|\s+([\d,]+)\s+([\d.]+)$", re.MULTILINE)


def run_cli(*args: str, timeout: float = 120, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """`python -m cachelimit ARGS`; the hub is offline so that no test can wait on the network."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        **env,
    }
    result = subprocess.run(
        [sys.executable, "-m", "cachelimit", *args],
        capture_output=True,
        timeout=timeout,
        env=environment,
        cwd=cwd or REPO,
    )
    # Decoded by hand: text mode would turn the status line's in-place '\r' updates into newlines.
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    return result


def run_cli_concurrently(commands: dict[str, list[str]], **env: str) -> dict[str, subprocess.CompletedProcess]:
    """Several `run_cli` at once: each process spends seconds importing torch and transformers."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {name: pool.submit(run_cli, *argv, **env) for name, argv in commands.items()}
        return {name: future.result() for name, future in futures.items()}


def tiny_kv_shape() -> tuple[int, int]:
    """(layers, bytes of one cached position's keys or values in one layer) of the built-in model."""
    config = build_tiny_model()[0].config
    head_dim = config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers, config.num_key_value_heads * head_dim * FLOAT32


def bounded_bytes(limit: int, sinks: int) -> int:
    layers, per_position = tiny_kv_shape()
    return layers * (2 * (limit + 1) + sinks) * per_position


def unbounded_bytes(positions: int, element_size: int = FLOAT32) -> int:
    layers, per_position = tiny_kv_shape()
    return layers * 2 * positions * per_position // FLOAT32 * element_size


def prompt_length(text: str) -> int:
    return len(build_tokenizer()(text)["input_ids"])


class FailureMixin:
    def assert_one_line_failure(self, result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
        self.assertEqual(result.returncode, code, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, lines[0])
        return lines[0]


def run_in_process(argv: list[str]) -> subprocess.CompletedProcess:
    """`cli.main(argv)`, for what ends before any model work (`python -m cachelimit` is `sys.exit(main())`)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(argv)
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())
