"""The benchmark's own correctness (no timing is asserted): the "ideal" cache computes what cachelimit computes,
a timed call continues its prefilled cache exactly as one `generate` would, the sweep plan is one cell per process
with its variants alternated, memory is counted from storages, and the report's ratios pair calls of one repeat."""

from __future__ import annotations

import json
import tempfile
import unittest
from pathlib import Path

import pytest
import torch
from parameterized import parameterized
from transformers.cache_utils import Cache

from cachelimit.bench import report as bench_report
from cachelimit.bench import sweep as benchmark
from cachelimit.bench import tables
from cachelimit.bench.alternate import Measurement, Timing
from cachelimit.bench.cell import VariantRun
from cachelimit.bench.ideal import RingBufferLayer
from cachelimit.bench.worker import build_model
from cachelimit.core.cache import kv_bytes
from cachelimit.families.patching import patch
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.common import build_tiny_model, left_padded_batch, returned_cache

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


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


class CellCallTest(unittest.TestCase):
    @parameterized.expand([("cachelimit",), ("cachelimit_sinks",), ("native_static",), ("ideal",), ("dynamic",)])
    def test_a_call_from_the_prefilled_copy_generates_what_one_generate_call_does(self, variant):
        """Every timed call continues a deep copy of one prefill: its tokens must be those of a single `generate`
        of the whole run with that variant, every time (a copy that shared state would drift on the second call)."""
        job = {"family": "mistral", "shape": "quick", "seed": 0, "positions": 256, "batch": 2, "prompt_tokens": 8,
               "new_tokens": 10, "role": "grid", "sample_every": 1, "limit": 8}  # fmt: skip
        models = {False: build_model("mistral", "quick", 0, 256), True: build_model("mistral", "quick", 0, 256, 9)}
        patch("mistral")
        prompt = torch.randint(1, 1024, (2, 8), generator=torch.Generator().manual_seed(3))
        run = VariantRun(job, variant, variant, 8, models, prompt)
        for _ in range(2):
            run.setup()
            timing = run()
            self.assertIsInstance(timing, Timing)
            self.assertGreater(timing.cpu_s, 0)
        self.assertEqual(len(run.step_cpu_ms), 2)
        self.assertEqual(len(run.step_cpu_ms[0]), job["new_tokens"] - 2)  # new - 1 tokens, one step between each
        self.assertEqual(run.steady_steps, job["new_tokens"] - 2 - 1)  # an eighth of 8 steps is warm-up
        options = {
            "cachelimit": {"cache_limit": 8}, "cachelimit_sinks": {"cache_limit": 8, "num_sink_tokens": 4},
            "native_static": {"cache_implementation": "static"}, "ideal": {}, "dynamic": {},
        }[variant]  # fmt: skip
        if variant == "ideal":
            options = {CACHE_ARGUMENT: Cache(layers=[RingBufferLayer(9) for _ in range(4)])}
        model = models[variant.startswith("native")]
        with torch.inference_mode():
            whole = model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=10, min_new_tokens=10, do_sample=False,
                **options,
            )  # fmt: skip
        self.assertTrue(torch.equal(run.tokens, whole[:, 8:]))
        self.assertEqual(len(set(run.shas)), 1)
        record = run.record()
        self.assertEqual([sample[0] for sample in record["samples"]], list(range(1, 11)))  # KV bytes every token
        self.assertEqual(record["kv_bytes"], record["samples"][-1][1])


class PlanTest(unittest.TestCase):
    def settings(self, *argv: str) -> dict:
        return benchmark.resolve(benchmark.build_parser().parse_args(list(argv)))

    def test_full_sweep_plan_is_one_cell_per_model_limit_and_batch(self):
        jobs = benchmark.plan(self.settings())
        grid = [job for job in jobs if job["role"] == "grid"]
        self.assertEqual(len(grid), 2 * 4 * 2)  # models x L x batch
        for job in grid:
            names = [name for name, _, _ in job["variants"]]
            expected = list(benchmark.VARIANTS)
            if job["family"] == "gpt2":  # no native sliding window
                expected = [name for name in expected if name not in benchmark.NATIVE]
            self.assertEqual(names, expected)
            self.assertTrue(all(limit == job["limit"] for _, _, limit in job["variants"]))
            self.assertEqual((job["baseline"], job["repeats"], job["warmup"]), ("ideal", 3, 1))
            self.assertEqual((job["prompt_tokens"], job["new_tokens"]), (job["limit"], 128))  # full window at once
        (long,) = [job for job in jobs if job["role"] == "long"]
        self.assertEqual([name for name, _, _ in long["variants"]], list(benchmark.LONG_VARIANTS))
        self.assertEqual((long["limit"], long["batch"], long["new_tokens"]), (1024, 1, 8192))
        for job in jobs:
            self.assertGreaterEqual(job["positions"], job["prompt_tokens"] + job["new_tokens"])

    def test_without_the_ideal_cache_the_first_variant_is_the_baseline(self):
        jobs = benchmark.plan(
            self.settings(
                "--variants", "cachelimit,dynamic", "--long-tokens", "0", "--cap-tokens", "0", "--repeats", "5"
            )
        )
        self.assertEqual({(job["baseline"], job["repeats"]) for job in jobs}, {("cachelimit", 5)})

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

    @parameterized.expand([("--tokens", "3"), ("--repeats", "0"), ("--warmup", "-1")])
    def test_too_few_tokens_repeats_or_warmups_are_refused(self, option, value):
        with self.assertRaisesRegex(ValueError, option):
            self.settings(option, value)


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


def synthetic_cell(cpu_s: dict[str, list[float]], role: str = "grid", steady_steps: int = 10, **overrides) -> dict:
    """A cell as `bench.cell.run_cell` returns it, with chosen CPU seconds per variant and repeat (wall = 2 x CPU)."""
    baseline = "ideal" if "ideal" in cpu_s else next(iter(cpu_s))
    timings = {name: [Timing(cpu_s=c, wall_s=2 * c) for c in values] for name, values in cpu_s.items()}
    measurement = Measurement(timings, baseline, (1.0, 1.0, 1.0), (2.0, 2.0, 2.0), 1, 2)
    cell = {
        "role": role, "family": "mistral", "limit": 1024, "batch": 1, "prompt_tokens": 1024, "new_tokens": 12,
        "repeats": len(next(iter(cpu_s.values()))), "baseline": baseline, "measurement": measurement.to_json(),
        "torch_threads": 1, "peak_rss_bytes": 100 << 20,
    }  # fmt: skip
    cell.update(overrides)
    cell["per_variant"] = {
        name: {
            "variant": name, "limit": cell["limit"], "steady_steps": steady_steps, "kv_bytes": 1 << 20,
            "tokens_sha1": "0", "layer_class": "X", "samples": [[1, 1 << 20, 0, 0], [12, 1 << 20, 0, 0]],
            "step_cpu_ms": [[1.0] * 10 for _ in values], "step_wall_ms": [[2.0] * 10 for _ in values],
        }
        for name, values in cpu_s.items()
    }  # fmt: skip
    return cell


class ReportTest(unittest.TestCase):
    def test_ratios_pair_the_calls_of_one_repeat_and_targets_judge_their_median(self):
        # Repeat 2 is slow for everyone: paired, it cancels; pooled medians would not.
        cell = synthetic_cell({
            "cachelimit": [0.8, 0.9, 8.0], "native_sliding": [1.0, 1.0, 10.0], "ideal": [0.79, 0.8, 8.1],
        })  # fmt: skip
        rows = bench_report.targets([cell], [])

        def row(*words: str) -> dict:
            return next(row for row in rows if all(word in row["target"] for word in words))

        native = row("native sliding", "batch 1")
        self.assertEqual(native["ratios"], [0.8, 0.9, 0.8])
        self.assertAlmostEqual(native["measured"], 0.8)
        self.assertEqual(native["spread"], "0.80 [0.80, 0.90]")
        self.assertTrue(native["met"])
        ideal = row("ideal", "batch 1")
        self.assertAlmostEqual(ideal["measured"], 0.8 / 0.79)  # median of 1.0127, 1.125, 0.988
        self.assertTrue(ideal["met"])
        self.assertIsNone(row("native sliding", "batch 4")["met"])  # no batch-4 cell: not in this sweep
        self.assertIn("90.00 / 100.00 CPU ms per step", native["detail"])  # median CPU s 0.9 / 1.0, 10 steps
        worst = row("worst cell")
        self.assertAlmostEqual(worst["measured"], 0.8 / 0.79)
        table = tables.grid_table([cell])
        self.assertIn(
            "| mistral | 1024 | 1 | 1.25 [1.23, 1.27] | 1.01 [0.99, 1.12] | 0.80 [0.80, 0.90] | 80.0 |", table
        )
        self.assertIn("0.80 [0.80, 0.90]", table)  # cachelimit / native sliding
        self.assertIn("1.0-2.0", table)  # the load before-after

    def test_long_run_flatness_is_per_repeat_after_the_fill(self):
        cell = synthetic_cell({"cachelimit": [1.0, 1.0], "ideal": [1.0, 1.0]}, role="long", limit=7, prompt_tokens=4)
        record = cell["per_variant"]["cachelimit"]
        warm_up = [50.0] * 103  # the warm-up round's call, listed first: left out
        record["step_cpu_ms"] = [warm_up, [9.0] * 3 + [10.0] * 50 + [11.0] * 50, [9.0] * 3 + [10.0] * 50 + [12.0] * 50]
        record["samples"] = [[1, 5, 0, 0], [3, 8, 0, 0], [12, 8, 0, 0]]
        (stats,) = [s for s in bench_report.long_run_stats(cell) if s["name"] == "cachelimit"]
        self.assertEqual((stats["fill_step"], stats["first_tenth_ms"], stats["last_tenth_ms"]), (3, 10.0, 11.5))
        self.assertEqual([round(value, 6) for value in stats["flatness"]], [1.1, 1.2])
        self.assertEqual((stats["quarter_tokens"], stats["kv_quarter_mib"]), (3, 8 / (1 << 20)))
        rows = bench_report.targets([cell], [stats])
        flat = next(row for row in rows if "flat" in row["target"])
        self.assertEqual((flat["spread"], flat["met"]), ("1.15 [1.10, 1.20]", False))
        kv = next(row for row in rows if "KV bytes" in row["target"])
        self.assertTrue(kv["met"])


class EndToEndTest(unittest.TestCase):
    def test_tiny_sweep_writes_json_table_and_plots(self):
        with tempfile.TemporaryDirectory() as out:
            options = "--quick --limits 8 --tokens 8 --repeats 2 --long-tokens 40 --long-limit 8 --models mistral"
            options += " --cap-tokens 0"  # the cap scenario: tests/test_bench_cap.py
            argv = [*options.split(), "--variants", "cachelimit,native_sliding,ideal", "--threads", "1", "--out", out]
            self.assertEqual(benchmark.main(argv), 0)
            payload = json.loads((Path(out) / "results.json").read_text())
            self.assertEqual([cell["role"] for cell in payload["cells"]], ["grid", "long"])
            for cell in payload["cells"]:
                given = [
                    "cachelimit",
                    "native_sliding",
                    "ideal",
                ]  # the grid keeps --variants' order, the long run its own
                order = given if cell["role"] == "grid" else [v for v in benchmark.LONG_VARIANTS if v in given]
                self.assertEqual(list(cell["per_variant"]), order)
                self.assertEqual(cell["measurement"]["baseline"], "ideal")
                self.assertEqual([len(order) for order in cell["measurement"]["orders"]], [3, 3])
                for record in cell["per_variant"].values():
                    # every call's steps, the warm-up round's first: 1 + 2 repeats
                    self.assertEqual([len(steps) for steps in record["step_cpu_ms"]], [cell["new_tokens"] - 2] * 3)
                    self.assertTrue(record["same_tokens_every_call"])
                self.assertEqual(len({record["tokens_sha1"] for record in cell["per_variant"].values()}), 1)
                self.assertEqual(
                    {record["layer_class"] for record in cell["per_variant"].values()},
                    {"BoundedLayer", "DynamicSlidingWindowLayer", "RingBufferLayer"},
                )
            self.assertEqual({s["n"] for s in payload["summary"]}, {2})
            table = (Path(out) / "table.md").read_text()
            self.assertIn("Load average", table)
            self.assertIn("command: `", table)
            for name in ("bench_ms_per_token.png", "bench_memory.png", "bench_grid.png", "table.md"):
                self.assertGreater((Path(out) / name).stat().st_size, 0, name)
            # An interrupted sweep resumes from the journal; here nothing is left to run, so nothing is re-measured.
            journal = (Path(out) / "runs.jsonl").read_text().splitlines()
            self.assertEqual(len(journal), 2)
            (Path(out) / "runs.jsonl").write_text("\n".join(journal + ['{"role": "grid", "family": "other"}']) + "\n")
            self.assertEqual(benchmark.main([*argv, "--resume"]), 0)
            resumed = json.loads((Path(out) / "results.json").read_text())
            self.assertEqual(resumed["cells"], payload["cells"])
            self.assertEqual(resumed["settings"]["resumed_runs"], 2)


if __name__ == "__main__":
    unittest.main()
