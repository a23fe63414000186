"""The soak benchmark (`benchmarks/soak.py`): its checks on made-up samples (each one able to fail), and one short
real run (2,000 tokens, a few seconds) whose KV bytes must be the documented full-window size at every sample.
The timing check of a short run on a shared machine is noise, so the real run asserts only that the exit status
agrees with the checks it wrote."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import pytest
from parameterized import parameterized

from .cli_helpers import REPO, bounded_bytes

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

SPEC = importlib.util.spec_from_file_location("soak", REPO / "benchmarks" / "soak.py")
soak = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(soak)

KV, RSS, MS = 1_000_000, 300 * 2**20, 2.5
FILL = 150  # the window is full from this generated token on


def samples(count: int = 20, every: int = 100, rss_growth: float = 0.0, slowdown: float = 1.0) -> list[dict]:
    """Flat samples, with RSS growing linearly by `rss_growth` and the forward's fastest steps by `slowdown` over
    the run (its mean by 1.5 times as much, the whole step by twice: those are reported, not checked)."""
    rows = []
    for index in range(count):
        share = index / (count - 1)
        rows.append(
            {
                "tokens": (index + 1) * every,
                "model_ms_p10": MS * (1 + (slowdown - 1) * share),
                "model_wall_ms_p10": 1.05 * MS * (1 + (slowdown - 1) * share),
                "model_ms_per_token": 1.1 * MS * (1 + 1.5 * (slowdown - 1) * share),
                "ms_per_token": 1.2 * MS * (1 + 2 * (slowdown - 1) * share),
                "cpu_ms_per_token": MS,
                "rss_bytes": round(RSS * (1 + rss_growth * share)),
                "heap_in_use_bytes": 1000 + index,
                "kv_bytes": KV,
            }
        )
    return rows


def evaluate(rows: list[dict], kv_seen: set[int] = frozenset({KV})) -> dict:
    return soak.evaluate(rows, set(kv_seen), KV, FILL, rss_tolerance=0.02)


class TestChecks(unittest.TestCase):
    def test_flat_run_passes(self):
        checks = evaluate(samples())
        self.assertEqual({name: check["passed"] for name, check in checks.items()}, dict.fromkeys(checks, True))
        self.assertEqual(set(checks), {"kv_bytes_constant", "rss_growth", "ms_per_token_flat"})

    @parameterized.expand([("another_size", {KV, KV + 512}), ("not_the_documented_size", {KV - 512})])
    def test_kv_bytes_must_be_exactly_the_full_window(self, _, seen):
        self.assertFalse(evaluate(samples(), seen)["kv_bytes_constant"]["passed"])

    @parameterized.expand([("grows_3_percent", 0.03, False), ("grows_1_percent", 0.01, True)])
    def test_rss_growth(self, _, growth, passed):
        check = evaluate(samples(rss_growth=growth))["rss_growth"]
        self.assertEqual(check["passed"], passed)
        self.assertLess(abs(check["measured"] - growth * 18 / 19), 1e-3)  # from the sample at 10 % (index 1)

    @parameterized.expand([("slower", 1.3, False), ("faster", 0.7, False), ("flat", 1.05, True)])
    def test_forward_ms_per_token_last_over_first_decile(self, _, slowdown, passed):
        check = evaluate(samples(slowdown=slowdown))["ms_per_token_flat"]
        self.assertEqual(check["passed"], passed)
        for reported in ("mean", "whole_step"):
            self.assertGreater(abs(check[reported]["ratio"] - 1), abs(check["ratio"] - 1))

    def test_samples_from_before_the_window_filled_are_left_out_of_the_time_check(self):
        rows = samples()
        rows[0]["model_ms_p10"] = rows[1]["model_ms_p10"] = 10 * MS  # intervals starting at 0 and 100 < FILL
        check = evaluate(rows)["ms_per_token_flat"]
        self.assertTrue(check["passed"])
        self.assertEqual(check["first_decile_ms"], MS)


class TestShortRun(unittest.TestCase):
    def test_2000_tokens(self):
        environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        with tempfile.TemporaryDirectory() as folder:
            argv = ["--tokens", "2000", "--every", "200", "--cache-limit", "64", "--sinks", "4", "--out", folder]
            result = subprocess.run(
                [sys.executable, str(REPO / "benchmarks" / "soak.py"), *argv],
                capture_output=True,
                text=True,
                env=environment,
                timeout=300,
            )
            self.assertIn(result.returncode, (0, 1), result.stderr)
            summary = json.loads((Path(folder) / "soak.json").read_text())
            png = (Path(folder) / "soak.png").read_bytes()
        checks = summary["checks"]
        self.assertEqual(result.returncode, 0 if all(check["passed"] for check in checks.values()) else 1)
        self.assertEqual([sample["tokens"] for sample in summary["samples"]], list(range(200, 2001, 200)))
        self.assertEqual({sample["kv_bytes"] for sample in summary["samples"]}, {bounded_bytes(64, 4)})
        self.assertEqual(checks["kv_bytes_constant"]["measured"], [bounded_bytes(64, 4)])
        self.assertTrue(png.startswith(b"\x89PNG"))
        self.assertIn("kv_bytes_constant", result.stdout)
