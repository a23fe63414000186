"""The benchmark's own correctness (no timing is asserted): the "ideal" cache computes what cachelimit computes,
the sweep plan is the one documented, memory is counted from storages, and the report's statistics are right."""

from __future__ import annotations

import json
import tempfile
import unittest
from pathlib import Path

import torch
from parameterized import parameterized
from transformers.cache_utils import Cache

from cachelimit.bench import report as bench_report
from cachelimit.bench import sweep as benchmark
from cachelimit.bench.ideal import RingBufferLayer
from cachelimit.core.cache import kv_bytes
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.common import build_tiny_model, left_padded_batch, returned_cache


class IdealCacheTest(unittest.TestCase):
    @parameterized.expand([("gpt2", 4, 3), ("llama", 5, 6), ("mistral", 3, 1)])
    def test_ideal_ring_buffer_generates_what_cachelimit_generates(self, family, limit, prompt_length):
        """The speed bound must compute the same window, or comparing times with it would mean nothing."""
        model = build_tiny_model(family, layers=2)
        ids, mask = left_padded_batch([prompt_length], seed=2)
        options = dict(max_new_tokens=25, do_sample=False, output_logits=True, return_dict_in_generate=True)
        bounded = model.generate(ids, attention_mask=mask, cache_limit=limit, **options)
        ring = Cache(layers=[RingBufferLayer(limit + 1) for _ in range(model.config.num_hidden_layers)])
        ideal = model.generate(ids, attention_mask=mask, **{CACHE_ARGUMENT: ring}, **options)
        self.assertTrue(torch.equal(bounded.sequences, ideal.sequences))
        torch.testing.assert_close(torch.stack(ideal.logits), torch.stack(bounded.logits), atol=1e-5, rtol=0)
        self.assertEqual(kv_bytes(ring), returned_cache(bounded).kv_bytes())


class PlanTest(unittest.TestCase):
    def settings(self, *argv: str) -> dict:
        return benchmark.resolve(benchmark.build_parser().parse_args(list(argv)))

    def test_full_sweep_plan(self):
        jobs = benchmark.plan(self.settings())
        grid = [job for job in jobs if job["role"] == "grid"]
        long = [job for job in jobs if job["role"] == "long"]
        self.assertEqual(len(grid), 4 * 2 * (6 + 4))  # L x batch x (Mistral: 6 variants, GPT-2: no native window)
        self.assertFalse([job for job in grid if job["family"] == "gpt2" and job["variant"] in benchmark.NATIVE])
        self.assertTrue(all(job["prompt_tokens"] == job["limit"] for job in grid))  # full window from step one
        self.assertTrue(all(job["new_tokens"] == 128 for job in grid))
        self.assertEqual(
            sorted((job["variant"], job["limit"], job["batch"], job["new_tokens"]) for job in long),
            sorted((variant, 1024, 1, 8192) for variant in benchmark.LONG_VARIANTS),
        )
        for job in jobs:
            self.assertGreaterEqual(job["positions"], job["prompt_tokens"] + job["new_tokens"])

    def test_repeats_alternate_the_variant_order_within_a_cell(self):
        jobs = benchmark.plan(self.settings("--repeats", "3", "--models", "gpt2", "--limits", "8", "--batches", "1"))
        order = [(job["repeat"], job["variant"]) for job in jobs if job["role"] == "grid"]
        variants = ["dynamic", "cachelimit", "cachelimit_sinks", "ideal"]
        expected = [(0, v) for v in variants] + [(1, v) for v in reversed(variants)] + [(2, v) for v in variants]
        self.assertEqual(order, expected)

    def test_quick_plan_is_small(self):
        settings = self.settings("--quick")
        jobs = benchmark.plan(settings)
        self.assertEqual({job["limit"] for job in jobs if job["role"] == "grid"}, {128, 512})
        self.assertEqual({job["batch"] for job in jobs}, {1})
        self.assertTrue(settings["shared_process"])

    @parameterized.expand([("--limits", "0"), ("--limits", "a,b"), ("--models", "llama"), ("--variants", "roll")])
    def test_bad_arguments_exit_with_usage_error(self, option, value):
        with self.assertRaises(SystemExit) as raised:
            benchmark.build_parser().parse_args([option, value])
        self.assertEqual(raised.exception.code, 2)


class MemoryCountTest(unittest.TestCase):
    def test_a_sliced_window_counts_the_storage_it_keeps_alive(self):
        class Layer:
            pass

        layer = Layer()
        full = torch.zeros(1, 2, 9, 4)
        layer.keys, layer.values = full[:, :, 1:], torch.zeros(1, 2, 8, 4)
        cache = Layer()
        cache.layers = [layer]
        self.assertEqual(kv_bytes(cache), (9 + 8) * 2 * 4 * 4)


def synthetic_run(variant: str, step_ms: list[float], role: str = "grid", **overrides) -> dict:
    run = {
        "role": role, "family": "mistral", "variant": variant, "limit": 4, "batch": 1, "prompt_tokens": 4,
        "new_tokens": len(step_ms) + 1, "layer_class": "X", "tokens_sha1": "0", "step_ms": step_ms,
        "kv_bytes": 1 << 20, "peak_rss_bytes": 100 << 20, "prefill_s": 0.1, "torch_threads": 1,
        "samples": [[1, 1 << 20, 100 << 20, 100 << 20], [len(step_ms) + 1, 1 << 20, 100 << 20, 100 << 20]],
    }  # fmt: skip
    run.update(overrides)
    return run


class ReportTest(unittest.TestCase):
    def test_summary_drops_warm_up_and_reports_quartiles(self):
        steps = [100.0] * 8 + [float(value) for value in range(1, 65)]  # 72 steps: the first 8 are warm-up
        summary = bench_report.summarize([synthetic_run("cachelimit", steps)])
        self.assertEqual(summary["median_ms"], 32.5)
        self.assertEqual((summary["q1_ms"], summary["q3_ms"]), (16.75, 48.25))
        self.assertAlmostEqual(summary["tokens_per_s"], 64 * 1e3 / sum(range(1, 65)))

    def test_long_run_flatness_and_rss_growth(self):
        steps = [9.0] * 3 + [10.0] * 50 + [11.0] * 50  # limit 7, prompt 4: the window is full after 3 steps
        samples = [[1, 0, 0, 100 << 20], [26, 0, 0, 100 << 20], [104, 0, 0, 110 << 20]]
        run = synthetic_run("cachelimit", steps, role="long", limit=7, samples=samples)
        stats = bench_report.long_run_stats(run)
        self.assertEqual((stats["fill_step"], stats["first_tenth_ms"], stats["last_tenth_ms"]), (3, 10.0, 11.0))
        self.assertAlmostEqual(stats["flatness_ratio"], 1.1)
        self.assertEqual(stats["quarter_tokens"], 26)
        self.assertAlmostEqual(stats["rss_growth"], 0.1)

    def test_targets_are_ratios_of_medians(self):
        results = [
            synthetic_run("cachelimit", [8.0] * 20, limit=1024),
            synthetic_run("native_sliding", [10.0] * 20, limit=1024),
            synthetic_run("ideal", [7.9] * 20, limit=1024),
        ]
        summaries = bench_report.summarize_all(results)
        rows = bench_report.targets(summaries, [])

        def row(*words: str) -> dict:
            return next(row for row in rows if all(word in row["target"] for word in words))

        self.assertAlmostEqual(row("native sliding", "batch 1")["measured"], 0.8)
        self.assertTrue(row("native sliding", "batch 1")["met"])
        self.assertAlmostEqual(row("ideal", "batch 1")["measured"], 8.0 / 7.9)
        self.assertTrue(row("ideal", "batch 1")["met"])
        self.assertIsNone(row("native sliding", "batch 4")["met"])  # no batch-4 run: not in this sweep


class EndToEndTest(unittest.TestCase):
    def test_tiny_sweep_writes_json_table_and_plots(self):
        with tempfile.TemporaryDirectory() as out:
            options = "--quick --limits 8 --tokens 6 --repeats 2 --long-tokens 40 --long-limit 8 --models mistral"
            options += " --cap-tokens 0"  # the cap scenario: tests/test_bench_cap.py
            argv = [*options.split(), "--variants", "cachelimit,native_sliding,ideal", "--threads", "1", "--out", out]
            self.assertEqual(benchmark.main(argv), 0)
            payload = json.loads((Path(out) / "results.json").read_text())
            self.assertEqual(len(payload["runs"]), 3 * 2 + 3)  # two repeats of the grid, one long run
            self.assertEqual([s["repeats"] for s in payload["summary"]], [2, 2, 2, 1, 1, 1])
            self.assertEqual(
                {run["layer_class"] for run in payload["runs"]},
                {"BoundedLayer", "DynamicSlidingWindowLayer", "RingBufferLayer"},
            )
            for run in payload["runs"]:
                self.assertEqual(len(run["step_ms"]), run["new_tokens"] - 1)
            self.assertEqual(len({run["tokens_sha1"] for run in payload["runs"] if run["role"] == "grid"}), 1)
            for name in ("bench_ms_per_token.png", "bench_memory.png", "bench_grid.png", "table.md"):
                self.assertGreater((Path(out) / name).stat().st_size, 0, name)
            # An interrupted sweep resumes from the journal; here nothing is left to run, so nothing is re-measured.
            journal = (Path(out) / "runs.jsonl").read_text().splitlines()
            self.assertEqual(len(journal), 9)
            (Path(out) / "runs.jsonl").write_text("\n".join(journal + ['{"role": "grid", "family": "other"}']) + "\n")
            self.assertEqual(benchmark.main([*argv, "--resume"]), 0)
            resumed = json.loads((Path(out) / "results.json").read_text())
            self.assertEqual(resumed["runs"], payload["runs"])
            self.assertEqual(resumed["settings"]["resumed_runs"], 9)


if __name__ == "__main__":
    unittest.main()
