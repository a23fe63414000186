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
        self.assertEqual((args.budget_s, args.lengths, args.new_tokens), (480, (2048, 8192, 32768), 32))
        self.assertEqual((args.repeats, args.compiled_at), (3, (32768,)))
        self.assertEqual(args.out, Path("docs/gpu_check"))

    def test_only_a_subset(self):
        self.assertEqual(gpu_check.parse_args(["--only", "compile, exactness"]).only, ("compile", "exactness"))
        self.assertEqual(gpu_check.parse_args(["--compiled-at", "none"]).compiled_at, ())

    def test_bad_arguments_are_refused_naming_them(self):
        for argv, named in [
            (["--only", "speed"], "unknown check"),
            (["--only", ","], "unknown check"),
            (["--budget-s", "0"], "--budget-s"),
            (["--lengths", "ten"], "--lengths"),
            (["--lengths", ","], "--lengths"),
            (["--lengths", "100,200", "--new-tokens", "100"], "--new-tokens"),
            (["--new-tokens", "1"], "--new-tokens"),
            (["--lengths", "100", "--compiled-at", "200"], "--compiled-at"),
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


class DecodeChecksOnCpuTest(unittest.TestCase):
    """The decode-speed, policy and sync checks of `cachelimit.bench.gpu_decode`, rehearsed small on CPU."""

    def test_decode_speed_gives_every_variant_its_ratio(self):
        from cachelimit.bench import gpu_decode

        model = gpu_decode.smollm2_shaped("cpu", torch.float32, positions=256, num_hidden_layers=2, vocab_size=128)
        with _stdout():
            rows = gpu_decode.decode_speed(model, (64, 96), new=4, repeats=2, limit=24, compiled_at=(96,))
        cases = [row["case"] for row in rows]
        eager = ["unbounded", "window", "window + 4 sinks", "keydiff + 4 sinks", "tova + 4 sinks", "snapkv + 4 sinks"]
        compiled = ["compiled StaticCache", "compiled ring", "compiled ring + 4 sinks"]
        self.assertEqual(cases, [f"T=64, {n}" for n in eager] + [f"T=96, {n}" for n in eager + compiled])
        for row in rows:
            self.assertEqual(len(row["steps_ms"]), 2)  # the warm-up repeat is not among them
            self.assertTrue(row["ratio_range"][0] <= row["ratio"] <= row["ratio_range"][1])
        baselines = [row for row in rows if row["case"].endswith(("unbounded", "StaticCache"))]
        self.assertEqual([row["ratio"] for row in baselines], [1.0, 1.0, 1.0])

    def test_a_passed_deadline_skips_lengths(self):
        from cachelimit.bench import gpu_decode

        rows = gpu_decode.decode_speed(None, (64,), deadline=0.0)
        self.assertEqual([(row["case"], row["status"]) for row in rows], [("T=64", "skipped")])

    def test_policies_agree_across_devices_and_syncs_are_counted(self):
        from cachelimit.bench import gpu_decode

        rows = gpu_decode.policies_across_devices("cpu", "cpu", new=8)
        self.assertEqual([row["status"] for row in rows], ["pass"] * 3, rows)
        syncs = gpu_decode.host_syncs("cpu", 2, 4)  # on CPU the sync debug mode does not exist: none counted
        self.assertEqual({row["status"] for row in syncs}, {"pass"})
        self.assertEqual(len(syncs), 5)


def _stdout():
    import contextlib
    import io

    return contextlib.redirect_stdout(io.StringIO())
