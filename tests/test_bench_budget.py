"""The budget scenario (`cachelimit.bench.budget`): the rows it fits in a KV budget come from the documented memory
layout (`bench.budget_fit`, written from the specification), and equal, to the byte, what the caches of real runs
hold: unbounded, bounded while the ring still grows and once it is full, with sinks (RoPE: un-rotated sink keys),
batches and beams. Plus the planner (the two caches alternated, repeated), the worker run, the report (ratios paired
by repeat, median [min, max]) and `--resume`, on tiny seeded models or fake runs (fast)."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from cachelimit.bench import budget, budget_fit, budget_report, budget_run
from cachelimit.core.cache import kv_bytes
from cachelimit.hf.compat import passed_cache, uses_rope
from tests.common import VOCAB, build_tiny_model

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

GPT2_CONFIG = {"n_positions": 256}


def held_after(model, prompt_tokens: int, new_tokens: int, rows: int = 1, num_beams: int = 1, **window) -> int:
    """KV bytes the cache of one real `generate` holds when it returns."""
    caches = []
    hook = model.register_forward_pre_hook(lambda m, a, k: caches.append(passed_cache(k)), with_kwargs=True)
    ids = torch.randint(1, VOCAB, (rows, prompt_tokens), generator=torch.Generator().manual_seed(0))
    try:
        with torch.inference_mode():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                num_beams=num_beams,
                **window,
            )
    finally:
        hook.remove()
    return kv_bytes(caches[0])


def fitted(model, prompt_tokens, new_tokens, limit=None, sinks=0) -> int:
    element = next(model.parameters()).element_size()
    layout = budget_fit.layout_of(model.config, element, rope=uses_rope(model.config))
    return budget_fit.row_bytes(layout, prompt_tokens, new_tokens, limit, sinks)


@pytest.fixture(scope="module")
def llama():
    return build_tiny_model("llama", layers=2)


@pytest.mark.parametrize(
    "prompt_tokens, new_tokens, limit, sinks",
    [
        (5, 9, None, 0),  # unbounded: P + T - 1 columns
        (3, 6, 20, 0),  # the ring still growing: 3 -> 6 -> 12 slots (not 8 columns, not 21)
        (5, 30, 8, 0),  # full: L + 1 slots
        (5, 30, 8, 3),  # sinks: S + R slots, plus S un-rotated sink keys (RoPE)
        (12, 4, 8, 0),  # a prompt longer than the ring
        (2, 40, 16, 2),  # growth capped at R = L - S + 1 = 15 ring slots
    ],
)
def test_fit_equals_the_bytes_a_run_holds(llama, prompt_tokens, new_tokens, limit, sinks):
    window = {} if limit is None else {"cache_limit": limit, "num_sink_tokens": sinks}
    expected = fitted(llama, prompt_tokens, new_tokens, limit, sinks)
    assert held_after(llama, prompt_tokens, new_tokens, **window) == expected
    assert held_after(llama, prompt_tokens, new_tokens, rows=3, **window) == 3 * expected
    assert held_after(llama, prompt_tokens, new_tokens, rows=1, num_beams=3, **window) == 3 * expected


def test_fit_of_a_model_without_rotary_keeps_no_sink_keys():
    gpt2 = build_tiny_model("gpt2", layers=2, **GPT2_CONFIG)
    window = {"cache_limit": 8, "num_sink_tokens": 3}
    assert held_after(gpt2, 5, 30, **window) == fitted(gpt2, 5, 30, 8, 3)
    assert fitted(gpt2, 5, 30, 8, 3) == fitted(gpt2, 5, 30, 8, 0)  # S sink slots + R ring = L + 1, no extra keys


def test_a_wrong_rule_would_not_match(llama):
    """The comparison can fail: the ring allocated up front (L + 1 slots) or exactly the columns seen is not what a
    growing ring holds."""
    layout = budget_fit.layout_of(llama.config, 4, rope=True)
    held = held_after(llama, 3, 6, cache_limit=20)
    assert held != 21 * layout.column_bytes and held != 8 * layout.column_bytes
    assert held == 12 * layout.column_bytes


def test_rows_that_fit_at_the_boundary():
    assert budget_fit.rows_that_fit(3 * 1000, 1000) == 3
    assert budget_fit.rows_that_fit(3 * 1000 - 1, 1000) == 2
    assert budget_fit.rows_that_fit(999, 1000) == 0
    with pytest.raises(ValueError, match="positive"):
        budget_fit.rows_that_fit(0, 1000)


def test_layout_refuses_sliding_layers():
    config = build_tiny_model("mistral", layers=2, sliding_window=8).config
    with pytest.raises(ValueError, match="full attention"):
        budget_fit.layout_of(config, 4, rope=True)


def settings(**overrides) -> dict:
    args = budget.build_parser().parse_args(["--models", "bench", "--shape", "quick", "--threads", "1"])
    values = budget.settings_of(args)
    values.update(overrides)
    return values


def test_plan_fills_the_budget_and_reports_what_does_not_fit():
    layout = budget_fit.KVLayout(layers=4, kv_heads=4, head_dim=64, element_bytes=4, rope=True)
    per_column = layout.column_bytes  # 8 KiB
    plan = budget.plan(
        settings(budget_bytes=100 * per_column, new_tokens=64, prompt_tokens=8, limit=16), {"bench": layout}
    )
    by = {(job["mode"], job["limit"]): job for job in plan}
    assert by["batch", None]["rows"] == 1 and by["batch", None]["predicted_row_bytes"] == 71 * per_column
    assert by["batch", 16]["rows"] == 100 // 17 and by["batch", 16]["batch"] == 5 and by["batch", 16]["num_beams"] == 1
    assert by["beams", 16]["num_beams"] == 5 and by["beams", 16]["batch"] == 1
    for job in plan:
        assert job["predicted_kv_bytes"] <= job["budget"] < (job["rows"] + 1) * job["predicted_row_bytes"]
    tight = budget.plan(
        settings(budget_bytes=50 * per_column, new_tokens=64, prompt_tokens=8, limit=16), {"bench": layout}
    )
    assert [job["rows"] for job in tight if job["limit"] is None and job["repeat"] == 1] == [0, 0]
    assert {job["rows"] for job in tight if job["limit"] is None} == {0}


@pytest.mark.parametrize("flags, message", [
    (["--budget-mib", "0"], "--budget-mib"), (["--new-tokens", "1"], "--new-tokens"),
    (["--sinks", "256"], "--sinks"), (["--models", "gpt3"], "--models"), (["--modes", "sample"], "--modes"),
    (["--repeats", "0"], "--repeats must be >= 1, got 0"),
])  # fmt: skip
def test_bad_settings_name_the_flag(flags, message):
    with pytest.raises(ValueError, match=message):
        budget.settings_of(budget.build_parser().parse_args(flags))


@pytest.fixture
def one_thread():
    """One torch thread, as the runs' `--threads 1` sets in a worker: on a busy machine torch's default threads spin
    (a second of CPU time for what takes a tenth with one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_worker_run_holds_what_was_fitted_and_the_report_says_so(tmp_path, one_thread):
    """The planned runs of the quick bench model, two repeats, in this process (but for the beams' unbounded runs);
    then the report."""
    layout = budget_fit.KVLayout(**budget_run.probe({"model": "bench", "shape": "quick", "seed": 0})["layout"])
    values = settings(budget_bytes=2**20, new_tokens=24, prompt_tokens=4, limit=8, repeats=2)
    jobs = budget.plan(values, {"bench": layout})
    records = []
    for job in jobs:
        if job["mode"] == "beams" and job["limit"] is None:
            continue  # the report must cope with a missing run too
        result = budget_run.run_one(job)
        assert result["kv_bytes_end"] == result["kv_bytes_most"] == job["predicted_kv_bytes"]
        assert result["sequences_out"] == job["batch"] * job["num_beams"] if job["mode"] == "batch" else True
        assert all(isinstance(result[key], float) for key in budget_report.LOADS)
        records.append(json.loads(json.dumps(result)))
    records.append({**records[0], "rows": 0, "mode": "batch", "model": "other"})
    del records[-1]["kv_bytes_end"]  # a planned cache of which no row fits
    text = budget_report.write_report(records, tmp_path)
    assert text.count("| yes |") == 6 and "**NO**" not in text
    assert text.count("not run: no row fits") == 1
    rows = {job["limit"]: job["rows"] for job in jobs if job["mode"] == "batch"}
    assert (
        f"bench, 1 MiB of KV and 24 new tokens: batch {rows[None]} unbounded vs {rows[8]} with cache_limit=8; "
        "bounded / unbounded, median [min, max] over 2 repeats: "
    ) in text
    data = json.loads((tmp_path / "budget.json").read_text())
    assert [(entry["model"], entry["mode"]) for entry in data["headlines"]] == [("bench", "batch")]  # beams: no pair
    head = data["headlines"][0]
    assert head["rows_bounded"] > head["rows_unbounded"]
    assert head["tokens_per_cpu_second_repeats"] == head["tokens_per_second_repeats"] == [1, 2]
    assert (tmp_path / "budget.png").stat().st_size > 0


def fake_run(**values) -> dict:
    """A journal record of a run that held what was fitted, with the given figures (or these)."""
    run = {"model": "bench", "mode": "batch", "limit": 8, "sinks": 0, "rows": 2, "budget": 100, "new_tokens": 4,
           "predicted_row_bytes": 40, "predicted_kv_bytes": 80, "kv_bytes_end": 80, "kv_bytes_most": 80,
           "peak_rss_bytes": 2**20, "rss_before_bytes": 0, "tokens_per_second": 1.0, "tokens_per_cpu_second": 2.0,
           "seconds": 8.0, "repeat": 1, "load_average_before": 1.0, "load_average_after": 1.0}  # fmt: skip
    return run | values


def test_the_report_flags_a_run_that_held_other_bytes(tmp_path):
    run = fake_run(kv_bytes_end=96, kv_bytes_most=96)
    assert "**NO**" in budget_report.write_report([run], tmp_path)
    assert "**NO**" not in budget_report.write_report([fake_run()], tmp_path)


@pytest.mark.parametrize("repeats", [1, 3])
def test_plan_alternates_the_two_caches_in_every_repeat(repeats):
    layout = budget_fit.KVLayout(layers=4, kv_heads=4, head_dim=64, element_bytes=4, rope=True)
    values = settings(budget_bytes=100 * layout.column_bytes, new_tokens=64, prompt_tokens=8, limit=16)
    plan = budget.plan(values | {"repeats": repeats}, {"bench": layout})
    expected = [(mode, r, limit) for mode in ("batch", "beams") for r in range(1, repeats + 1) for limit in (None, 16)]
    assert [(job["mode"], job["repeat"], job["limit"]) for job in plan] == expected
    first = {(job["mode"], job["limit"]): job for job in reversed(plan)}  # repeat 1 of each cache
    assert all(job == first[job["mode"], job["limit"]] | {"repeat": job["repeat"]} for job in plan)
    assert len({budget._key(job) for job in plan}) == len(plan)  # the repeat tells the journal's runs apart


UNBOUNDED_CPU, BOUNDED_CPU = [10.0, 40.0, 20.0], [35.0, 60.0, 90.0]  # paired by repeat: 3.5, 1.5, 4.5
UNBOUNDED_WALL, BOUNDED_WALL = [2.0, 4.0, 3.0], [5.0, 6.0, 9.0]
LOADS = [(0.5, 1.5), (2.0, 2.5), (1.0, 3.25)]


@pytest.mark.parametrize("missing", [None, 2, 3])  # a repeat whose bounded run is not in the journal
def test_the_report_pairs_the_runs_of_each_repeat(tmp_path, missing):
    """Ratio per repeat, then median [min, max]: not the ratio of the medians, not the sorted values paired."""
    records = []
    for repeat, loads in enumerate(LOADS, 1):
        for limit, cpu, wall in ((None, UNBOUNDED_CPU, UNBOUNDED_WALL), (8, BOUNDED_CPU, BOUNDED_WALL)):
            if limit is not None and repeat == missing:
                continue
            values = {"tokens_per_cpu_second": cpu[repeat - 1], "tokens_per_second": wall[repeat - 1]}
            values.update(load_average_before=loads[0], load_average_after=loads[1])
            records.append(fake_run(limit=limit, repeat=repeat, rows=2 if limit else 1, **values))
    records.reverse()  # the journal's order must not matter
    text = budget_report.write_report(records, tmp_path)
    head = json.loads((tmp_path / "budget.json").read_text())["headlines"][0]
    kept = [r for r in range(1, len(LOADS) + 1) if r != missing]
    for key, dense, bounded in (("tokens_per_cpu_second", UNBOUNDED_CPU, BOUNDED_CPU),
                                ("tokens_per_second", UNBOUNDED_WALL, BOUNDED_WALL)):  # fmt: skip
        ratios = [bounded[r - 1] / dense[r - 1] for r in kept]
        assert head[f"{key}_repeats"] == kept and head[f"{key}_ratios"] == ratios
        summary = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}
        assert head[f"{key}_ratio"] == summary
        label = "per CPU second" if key == "tokens_per_cpu_second" else "in wall-clock tokens/s"
        assert f"{summary['median']:.2f} [{summary['min']:.2f}, {summary['max']:.2f}] {label}" in text
    loads = [load for record in records for load in (record["load_average_before"], record["load_average_after"])]
    assert head["load_average_range"] == [min(loads), max(loads)]
    assert f"median [min, max] over {len(kept)} repeats: " in text
    assert f"; load average {min(loads):.2f}-{max(loads):.2f}" in text
    assert text.count("| bench | batch |") == len(records)  # a row per run, with its repeat
    assert all(f"| {record['repeat']} | {record['rows']} |" in text for record in records)


def test_a_bad_repeats_flag_is_one_line_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        budget.main(["--repeats", "0", "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--repeats must be >= 1, got 0" in error
    assert not (tmp_path / "out").exists()


def test_resume_keeps_the_finished_repeats(tmp_path, monkeypatch):
    """`--resume` runs only the repeats the journal lacks; a record from before repeats existed is repeat 1."""
    layout = budget_fit.KVLayout(layers=4, kv_heads=4, head_dim=64, element_bytes=4, rope=True)
    monkeypatch.setattr(budget, "probe_layouts", lambda models, values, workdir: {"bench": layout})
    ran = []

    def worker(specs, workdir, index, on_line, module):
        job = specs[0]
        ran.append((job["repeat"], job["limit"]))
        speed = {"tokens_per_second": job["rows"] + job["repeat"], "tokens_per_cpu_second": 2.0 * job["rows"]}
        held = {"kv_bytes_end": job["predicted_kv_bytes"], "kv_bytes_most": job["predicted_kv_bytes"]}
        return [fake_run(**job, **speed, **held)], ""

    monkeypatch.setattr(budget.runner, "_run_worker", worker)
    flags = ["--models", "bench", "--modes", "batch", "--budget-mib", "1", "--new-tokens", "64", "--limit", "16",
             "--prompt-tokens", "8", "--out", str(tmp_path)]  # fmt: skip
    journal = tmp_path / "budget_runs.jsonl"
    assert budget.main(flags + ["--repeats", "2"]) == 0
    assert ran == [(1, None), (1, 16), (2, None), (2, 16)]
    ran.clear()
    assert budget.main(flags + ["--repeats", "3", "--resume"]) == 0
    assert ran == [(3, None), (3, 16)]
    records = budget._records(journal)
    assert [(record["repeat"], record["limit"]) for record in records] == [(1, None), (1, 16), (2, None), (2, 16),
                                                                        (3, None), (3, 16)]  # fmt: skip
    old = [{key: value for key, value in record.items() if key != "repeat"} for record in records[:2]]
    journal.write_text("".join(json.dumps(record) + "\n" for record in old))
    ran.clear()
    assert budget.main(flags + ["--repeats", "2", "--resume"]) == 0
    assert ran == [(2, None), (2, 16)]
    head = json.loads((tmp_path / "budget.json").read_text())["headlines"][0]
    assert head["tokens_per_cpu_second_repeats"] == [1, 2]
