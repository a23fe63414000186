"""`cachelimit bench --long`: its flags (a bad one is one line and exit 2, before any model loads) and its report,
built from fake timings of known ratios (no model, no torch run): the table's ratios pair the same repeat against
each baseline, the prefill table's memory ratios are the children's figures, and the plot is written."""

from __future__ import annotations

import json
import statistics

import pytest

from cachelimit.bench import long as long_bench
from cachelimit.bench import long_report
from cachelimit.bench.alternate import Measurement, Timing
from cachelimit.bench.long_prefill import CASES
from cachelimit.bench.long_steps import AT_LIMIT, CACHELIMIT, IDEAL, NATIVE, SINKS_VARIANT, UNBOUNDED, VARIANTS
from cachelimit.cli.main import run

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

BAD = [
    (["--limit", "0"], "argument --limit: must be an int in [1, "),
    (["--lengths", "2048,x"], "argument --lengths: must be an int in [1, "),
    (["--lengths", "1024"], "--lengths must all be > --limit (1024): nothing is cut at [1024]"),
    (["--prefill-lengths", "512,4096"], "--prefill-lengths must all be > --limit (1024): nothing is cut at [512]"),
    (["--sinks", "1024"], "--sinks must be in [0, --limit) = [0, 1024), got 1024"),
    (["--steps", "1"], "--steps must be >= 2, got 1"),
    (["--repeats", "0"], "argument --repeats: must be an int in [1, "),
    (["--dtypes", "float16"], "argument --dtypes: unknown ['float16']; choose from float32, bfloat16"),
    (["--parts", "steps,x"], "argument --parts: unknown ['x']; choose from steps, prefill"),
    (["--threads", "0"], "argument --threads: must be an int in [1, 1024], got 0"),
    (["--prefill-chunk", "-1"], "argument --prefill-chunk: must be an int in [1, "),
]


@pytest.mark.parametrize(("argv", "expected"), BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_a_bad_flag_is_one_line_and_exit_2(argv, expected, capsys, tmp_path):
    assert run(["bench", "--long", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"cachelimit bench --long: error: {expected}" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


def test_the_defaults_are_the_issues_scenario():
    parser = long_bench.build_parser()
    settings = long_bench.resolve(parser.parse_args([]))
    assert settings["lengths"] == [2048, 8192, 16384, 32768]
    assert settings["dtypes"] == ["float32", "bfloat16"]
    assert (settings["limit"], settings["sinks"], settings["prefill_chunk"], settings["threads"]) == (1024, 4, 1024, 1)
    assert long_bench.resolve(parser.parse_args(["--limit", "64", "--lengths", "65", "--prefill-lengths", "65"]))


# Per (dtype, T): each variant's CPU seconds per repeat, as multiples of the unbounded call of that repeat (which
# swings 3x between repeats, so only a same-repeat pairing gives these exact ratios back).
BASE = [1.0, 3.0, 2.0]
FACTORS = {UNBOUNDED: 1.0, AT_LIMIT: 0.1, CACHELIMIT: 0.11, SINKS_VARIANT: 0.12, NATIVE: 0.1, IDEAL: 0.1}


def fake_measurement(names, factors, base=BASE, wall=2.0) -> dict:
    variants = {name: [Timing(b * factors[name], wall * b) for b in base] for name in names}
    return Measurement(variants, names[0], (9.0, 8.0, 7.0), (9.5, 8.5, 7.5), 1, 2).to_json()


def fake_results(steps: int = 16) -> dict:
    cells = []
    for dtype in ("float32", "bfloat16"):
        for total, scale in ((2048, 1.0), (16384, 4.0)):
            factors = {**FACTORS, UNBOUNDED: 1.0}
            m = fake_measurement(list(VARIANTS), factors, base=[b * scale for b in BASE])
            cells.append({"dtype": dtype, "total": total, "limit": 1024, "sinks": 4, "steps": steps, "measurement": m})
    prefill_factors = dict(zip(CASES, (1.0, 0.9, 0.25), strict=True))
    raw = {
        case: [{"growth_bytes": int(800 * 2**20 * f), "peak_rss_bytes": int((600 + 800 * f) * 2**20)}]
        for case, f in zip(CASES, (1.0, 0.5, 0.1), strict=True)
    }
    prefill = [
        {
            "dtype": "float32",
            "total": 8192,
            "limit": 1024,
            "chunk": 1024,
            "measurement": fake_measurement(list(CASES), prefill_factors, base=[10.0]),
            "raw": raw,
        }
    ]
    checks = [{"dtype": "float32", "total": 2048, "same_tokens": True, "max_logit_diff_vs_native": {NATIVE: 0.0}}]
    return {"machine": "a fake machine", "steps": cells, "prefill": prefill, "checks": checks}


def test_step_rows_pair_each_repeat_with_every_baseline():
    cell = fake_results()["steps"][1]  # float32, T = 16384: the unbounded call takes 4x [1, 3, 2] s
    rows = {row["variant"]: row for row in long_report.step_rows(cell)}
    assert list(rows) == list(VARIANTS)
    mine = rows[CACHELIMIT]
    assert mine["vs unbounded at T"] == pytest.approx([0.11] * 3)
    assert mine["vs unbounded at T=L"] == pytest.approx([1.1] * 3)
    assert mine["vs native window"] == pytest.approx([1.1] * 3)
    assert rows[SINKS_VARIANT]["vs ideal ring"] == pytest.approx([1.2] * 3)
    assert mine["cpu_ms_per_step"] == pytest.approx(statistics.median([4 * 0.11 * b for b in BASE]) * 1e3 / 16)
    assert rows[UNBOUNDED]["wall_ms_per_step"] == pytest.approx(statistics.median([8.0 * b for b in BASE]) * 1e3 / 16)


def test_the_report_writes_the_tables_the_plot_and_reads_back_its_parts(tmp_path):
    results = fake_results()
    for part in ("steps", "prefill"):  # as the two runs write them
        keep = {"machine": results["machine"], part: results[part], "checks": results["checks"] * (part == "steps")}
        (tmp_path / f"results_{part}.json").write_text(json.dumps(keep))
    merged = long_report.load_results(tmp_path)
    assert merged["steps"] == results["steps"] and merged["prefill"] == results["prefill"]
    text = long_report.write_report(merged, tmp_path)
    assert (tmp_path / "table.md").read_text() == text
    assert (tmp_path / "step_cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Machine: a fake machine." in text
    assert "| float32 | 16,384 | cachelimit | 55.0 | 1000.0 | 0.11 [0.11, 0.11] | 1.10 [1.10, 1.10] | " in text
    assert "| bfloat16 | 2,048 | unbounded | 125.0 |" in text
    # prefill: CPU 0.25x, memory growth 0.10x (800 MiB vs 80 MiB), peak RSS in MiB
    assert "| float32 | 8,192 | cache_limit=L, chunked | 2.5 | 0.25 [0.25, 0.25] | 680 | 80 | 0.10 |" in text
    assert "| float32 | 8,192 | unbounded | 10.0 | 1.00 [1.00, 1.00] | 1400 | 800 | 1.00 |" in text
    assert "Load average 9.00, 8.00, 7.00 before" in text
    assert "same tokens" in text


def test_a_measurement_survives_the_json_round_trip():
    data = fake_measurement(list(VARIANTS), FACTORS)
    again = long_report.measurement_from_json(json.loads(json.dumps(data)))
    assert again.to_json() == data


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_native_window_copy_is_the_same_model_and_the_variants_do_the_same_work(dtype):
    """The Mistral copy of a Llama gives the Llama's logits at far positions (its float32 rotary buffers kept: in
    bfloat16 a rounded copy was 42 logits off at 2k tokens), and cachelimit, the native window and the ideal ring,
    filled alike, pick the same greedy tokens (float32; bfloat16 sums in another slot order)."""
    import torch

    import cachelimit
    from cachelimit.bench.long_steps import native_window_model, same_work
    from cachelimit.cli.tiny_model import build_tiny_model

    model, _ = build_tiny_model()
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = None
    native = native_window_model(model, 64)
    ids = torch.randint(3, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(3000, 3012)[None]
    with torch.inference_mode():
        expected = model(ids, position_ids=positions).logits
        got = native(ids, position_ids=positions).logits
    assert torch.equal(expected, got)
    if dtype == "float32":
        with cachelimit.patched("llama"):
            check = same_work(model, native, total=200, limit=64, sinks=4)
        assert check["same_tokens"], check


def test_prefill_memory_comes_from_the_memory_children_when_a_cell_has_them():
    cell = fake_results()["prefill"][0]
    # the timed children's figures say 800/400/80 MiB; the memory children's 600/300/30 MiB: the table reads those
    cell["memory"] = {
        case: [{"growth_bytes": int(600 * 2**20 * f), "peak_rss_bytes": int((600 + 600 * f) * 2**20)}]
        for case, f in zip(CASES, (1.0, 0.5, 0.05), strict=True)
    }
    text = long_report.prefill_table([cell])
    assert "| float32 | 8,192 | cache_limit=L, chunked | 2.5 | 0.25 [0.25, 0.25] | 630 | 30 | 0.05 |" in text
    cell["memory"] = {case: [] for case in CASES}  # no memory children (--prefill-memory-runs 0): the timed ones
    assert "| float32 | 8,192 | cache_limit=L, chunked | 2.5 | 0.25 [0.25, 0.25] | 680 | 80 | 0.10 |" in (
        long_report.prefill_table([cell])
    )


def test_timed_prefill_children_use_the_default_allocator_and_memory_children_the_fixed_threshold(monkeypatch):
    from cachelimit.bench import long_prefill

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4096")  # a user's setting must not reach the timed children
    calls = []

    def child(spec, env):
        fixed = env.get("MALLOC_MMAP_THRESHOLD_")
        calls.append((spec["case"], fixed))
        cpu = {"unbounded": 10.0, "cache_limit=L": 9.0, "cache_limit=L, chunked": 5.0}[spec["case"]]
        # a memory child's CPU time is inflated by its page faults: it must not enter a ratio
        return {"cpu_s": cpu * (2 if fixed else 1), "wall_s": cpu, "growth_bytes": 1 if fixed else 2}

    monkeypatch.setattr(long_prefill, "_child", child)
    measurement, raw, memory = long_prefill.measure_prefill("bfloat16", 2048, 1024, 1024, 2, 1, memory_runs=1)
    assert [fixed for _, fixed in calls[:6]] == [None] * 6
    assert calls[6:] == [(case, str(long_prefill.MMAP_THRESHOLD)) for case in CASES]
    assert measurement.ratios("cache_limit=L, chunked") == pytest.approx([0.5, 0.5])
    assert [len(runs) for runs in raw.values()] == [2, 2, 2] and [len(runs) for runs in memory.values()] == [1, 1, 1]
    assert all(run["growth_bytes"] == 1 for runs in memory.values() for run in runs)
