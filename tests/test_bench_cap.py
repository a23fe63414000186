"""The benchmark's "cap" scenario (issue 8): its plan (one cell, variants alternated), and its ratios computed from a
synthetic cell (no timing): paired per repeat, bytes compared at every step."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

import pytest

from cachelimit.bench import cap
from cachelimit.bench import sweep as benchmark
from tests.test_benchmark import synthetic_cell

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


class CapPlanTest(unittest.TestCase):
    def settings(self, *argv: str) -> dict:
        return benchmark.resolve(benchmark.build_parser().parse_args(list(argv)))

    def test_cap_only_plans_one_cell_of_the_four_variants_alternated(self):
        (job,) = benchmark.plan(self.settings("--quick", "--cap-only", "--cap-tokens", "40", "--repeats", "2"))
        length = cap.CAP_PROMPT + 40
        expected = [("dynamic", 0), ("cachelimit", 100 * length), ("cachelimit", 2**30), ("cachelimit", 52)]
        self.assertEqual([(variant, limit) for _, variant, limit in job["variants"]], expected)
        self.assertEqual(job["baseline"], "unbounded DynamicCache")
        self.assertEqual((job["role"], job["family"], job["batch"], job["sample_every"]), ("cap", "mistral", 1, 1))
        self.assertEqual((job["prompt_tokens"], job["new_tokens"], job["repeats"]), (cap.CAP_PROMPT, 40, 2))

    def test_cap_runs_after_the_grid_and_can_be_skipped(self):
        roles = [job["role"] for job in benchmark.plan(self.settings("--quick"))]
        self.assertEqual(roles[-1], "cap")
        self.assertNotIn("cap", [job["role"] for job in benchmark.plan(self.settings("--quick", "--cap-tokens", "0"))])


class CapStatsTest(unittest.TestCase):
    def test_ratios_against_the_unbounded_call_of_the_same_repeat(self):
        tokens = 64
        length = cap.CAP_PROMPT + tokens
        unbounded = [1000 * (cap.CAP_PROMPT + count) for count in range(1, tokens + 1)]
        grown = [2 * held - 1000 for held in unbounded]  # just under twice, at every step
        crossed = [min(held, 50_000) for held in unbounded]
        names = [name for _, _, name in cap.cap_variants(tokens)]
        cpu = {names[0]: [1.0, 2.0], names[1]: [1.05, 2.3], names[2]: [1.2, 2.4], names[3]: [0.9, 1.8]}
        cell = synthetic_cell(cpu, role="cap", limit=0, prompt_tokens=cap.CAP_PROMPT, new_tokens=tokens)
        for (_, limit, _), name, held in zip(
            cap.cap_variants(tokens), names, [unbounded, grown, grown, crossed], strict=True
        ):
            record = cell["per_variant"][name]
            record.update(limit=limit, kv_bytes=held[-1], step_cpu_ms=[[1.0] * 62] * 2)
            record["samples"] = [[count, value, 0, 0] for count, value in enumerate(held, start=1)]
        rows = {row["limit"]: row for row in cap.cap_stats([cell])}
        self.assertEqual(set(rows), {100 * length, 2**30, cap.CAP_PROMPT + 32})
        self.assertEqual([round(r, 6) for r in rows[100 * length]["ratios"]], [1.05, 1.15])  # paired per repeat
        self.assertEqual(rows[100 * length]["wall_ratio_median"], 1.1)
        self.assertAlmostEqual(
            rows[2**30]["max_bytes_ratio"], max(g / u for g, u in zip(grown, unbounded, strict=True))
        )
        self.assertTrue(rows[cap.CAP_PROMPT + 32]["crossed"])
        targets = cap.cap_targets(list(rows.values()))
        self.assertEqual(len(targets), 4)  # time and bytes for the two limits above the length; none for crossed
        time_2_30 = next(t for t in targets if "2**30" in t["target"] and "CPU time" in t["target"])
        self.assertEqual((round(time_2_30["measured"], 6), time_2_30["met"]), (1.2, False))
        self.assertEqual(time_2_30["spread"], "1.20 [1.20, 1.20]")
        self.assertTrue(all(t["met"] for t in targets if "KV bytes" in t["target"]))
        with tempfile.TemporaryDirectory() as out:
            cap.plot_cap([cell], Path(out) / "cap.png")
            self.assertGreater((Path(out) / "cap.png").stat().st_size, 10_000)
        self.assertIn("| 1.10 [1.05, 1.15] | 1.10 | 1.990 |", cap.cap_table(list(rows.values())))


if __name__ == "__main__":
    unittest.main()
