"""The benchmark's "cap" scenario (issue 8): its plan, and its ratios computed from synthetic runs (no timing)."""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

from cachelimit.bench import cap
from cachelimit.bench import sweep as benchmark
from tests.test_benchmark import synthetic_run


def cap_run(variant: str, limit: int, repeat: int, step_ms: list[float], kv: list[int]) -> dict:
    samples = [[count, held, 0, 0] for count, held in enumerate(kv, start=1)]
    return synthetic_run(
        variant, step_ms, role="cap", limit=limit, repeat=repeat, prompt_tokens=cap.CAP_PROMPT,
        new_tokens=len(kv), samples=samples, kv_bytes=kv[-1],
    )  # fmt: skip


class CapPlanTest(unittest.TestCase):
    def settings(self, *argv: str) -> dict:
        return benchmark.resolve(benchmark.build_parser().parse_args(list(argv)))

    def test_cap_only_plans_the_four_runs_per_repeat_in_alternating_order(self):
        jobs = benchmark.plan(self.settings("--quick", "--cap-only", "--cap-tokens", "40", "--repeats", "2"))
        length = cap.CAP_PROMPT + 40
        runs = [
            ("dynamic", 0),
            ("cachelimit", 100 * length),
            ("cachelimit", 2**30),
            ("cachelimit", cap.CAP_PROMPT + 20),
        ]
        self.assertEqual([(job["variant"], job["limit"]) for job in jobs], runs + runs[::-1])
        for job in jobs:
            self.assertEqual((job["role"], job["family"], job["batch"], job["sample_every"]), ("cap", "mistral", 1, 1))
            self.assertEqual((job["prompt_tokens"], job["new_tokens"]), (cap.CAP_PROMPT, 40))

    def test_cap_runs_after_the_grid_and_can_be_skipped(self):
        roles = [job["role"] for job in benchmark.plan(self.settings("--quick"))]
        self.assertEqual(roles[-4:], ["cap"] * 4)
        self.assertNotIn("cap", [job["role"] for job in benchmark.plan(self.settings("--quick", "--cap-tokens", "0"))])


class CapStatsTest(unittest.TestCase):
    def test_ratios_against_the_unbounded_run(self):
        tokens = 64
        unbounded = [1000 * (cap.CAP_PROMPT + count) for count in range(tokens)]
        grown = [2 * held - 1000 for held in unbounded]  # just under twice, at every step
        crossed = [min(held, 50_000) for held in unbounded]
        length = cap.CAP_PROMPT + tokens
        results = []
        for repeat in range(2):
            results += [
                cap_run("dynamic", 0, repeat, [10.0] * 63, unbounded),
                cap_run("cachelimit", 100 * length, repeat, [10.5 + repeat] * 63, grown),
                cap_run("cachelimit", 2**30, repeat, [12.0] * 63, grown),
                cap_run("cachelimit", cap.CAP_PROMPT + 32, repeat, [9.0] * 63, crossed),
            ]
        rows = {row["limit"]: row for row in cap.cap_stats(results)}
        self.assertEqual(rows[100 * length]["paired_ratios"], [1.05, 1.15])
        self.assertAlmostEqual(rows[100 * length]["time_ratio"], 1.1)  # pooled median 11.0 / 10.0
        self.assertAlmostEqual(
            rows[2**30]["max_bytes_ratio"], max(g / u for g, u in zip(grown, unbounded, strict=True))
        )
        self.assertTrue(rows[cap.CAP_PROMPT + 32]["crossed"])
        targets = cap.cap_targets(list(rows.values()))
        self.assertEqual(len(targets), 4)  # time and bytes for the two limits above the length; none for crossed
        time_2_30 = next(t for t in targets if "2**30" in t["target"] and "ms/token" in t["target"])
        self.assertEqual((round(time_2_30["measured"], 6), time_2_30["met"]), (1.2, False))
        self.assertTrue(all(t["met"] for t in targets if "KV bytes" in t["target"]))
        with tempfile.TemporaryDirectory() as out:
            cap.plot_cap(results, Path(out) / "cap.png")
            self.assertGreater((Path(out) / "cap.png").stat().st_size, 10_000)
        self.assertIn("2**30", cap.cap_table(list(rows.values())))


if __name__ == "__main__":
    unittest.main()
