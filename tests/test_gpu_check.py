"""`benchmarks/gpu_check.py` on a machine without a GPU (issue 18): it fails at once with one line, its arguments and
result files behave, and its exactness check (the one that also runs on CPU) passes against transformers' native
sliding window and fails against a wrong one."""

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
import torch

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = load_script()


class WithoutCudaTest(unittest.TestCase):
    def test_fails_clearly_in_one_line(self):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run(
                [sys.executable, str(SCRIPT), "--out", out], capture_output=True, text=True, env=env, timeout=300
            )
            self.assertEqual(os.listdir(out), [])  # nothing written
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertEqual(done.stderr.strip().splitlines(), [gpu_check.NO_CUDA])
        self.assertEqual(done.stdout, "")


class ArgumentsTest(unittest.TestCase):
    def test_defaults(self):
        args = gpu_check.parse_args([])
        self.assertEqual(args.only, gpu_check.CHECKS)
        self.assertEqual((args.budget_s, args.tokens, args.new_tokens), (480, 8192, 512))
        self.assertEqual(args.out, Path("docs/gpu_check"))

    def test_only_a_subset(self):
        self.assertEqual(gpu_check.parse_args(["--only", "compile, exactness"]).only, ("compile", "exactness"))

    def test_bad_arguments_are_refused_naming_them(self):
        for argv, named in [
            (["--only", "speed"], "unknown check"),
            (["--only", ","], "unknown check"),
            (["--budget-s", "0"], "--budget-s"),
            (["--tokens", "ten"], "--tokens"),
            (["--tokens", "100", "--new-tokens", "100"], "--new-tokens"),
        ]:
            with self.subTest(argv=argv), self.assertRaises(SystemExit), _stderr() as err:
                gpu_check.parse_args(argv)
            self.assertIn(named, err.getvalue())


class ResultFilesTest(unittest.TestCase):
    def test_json_and_markdown(self):
        rows = [
            {"check": "compile", "case": "recompiles", "status": "pass", "value": 0},
            {"check": "exactness", "case": "sdpa | bf16", "status": "fail", "max_logit_diff": 0.123456},
        ]
        results = {"started": "then", "machine": "a GPU", "rows": rows}
        with tempfile.TemporaryDirectory() as out:
            as_json, as_markdown = gpu_check.write_results(results, Path(out) / "new")
            self.assertEqual(json.loads(as_json.read_text()), results)
            table = as_markdown.read_text().splitlines()
        self.assertIn("Machine: a GPU", table)
        self.assertEqual(table[-2], "| compile | recompiles | pass | 0 |  |  |  |  |")
        self.assertEqual(table[-1], "| exactness | sdpa / bf16 | fail |  |  |  | 0.1235 |  |")


class ExactnessCheckOnCpuTest(unittest.TestCase):
    def test_passes_against_the_native_window_and_fails_against_a_wrong_one(self):
        from cachelimit.bench import gpu_checks

        right = gpu_checks.exactness("cpu", (torch.float32,), ["sdpa"])
        wrong = gpu_checks.exactness("cpu", (torch.float32,), ["sdpa"], oracle_window=gpu_checks.LIMIT + 2)
        self.assertEqual([row["status"] for row in right], ["pass"], right)
        self.assertTrue(right[0]["tokens_equal"])
        self.assertEqual([row["status"] for row in wrong], ["fail"], wrong)
        self.assertGreater(wrong[0]["max_logit_diff"], 100 * gpu_checks.TOLERANCE[torch.float32])


def _stderr():
    import contextlib
    import io

    return contextlib.redirect_stderr(io.StringIO())


if __name__ == "__main__":
    unittest.main()
