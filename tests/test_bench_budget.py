"""The budget scenario (`cachelimit.bench.budget`): the rows it fits in a KV budget come from the documented memory
layout (`bench.budget_fit`, written from the specification), and equal, to the byte, what the caches of real runs
hold: unbounded, bounded while the ring still grows and once it is full, with sinks (RoPE: un-rotated sink keys),
batches and beams. Plus the planner, the worker run and the report, on tiny seeded models (fast)."""

from __future__ import annotations

import json

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
    assert [job["rows"] for job in tight if job["limit"] is None] == [0, 0]


@pytest.mark.parametrize("flags, message", [
    (["--budget-mib", "0"], "--budget-mib"), (["--new-tokens", "1"], "--new-tokens"),
    (["--sinks", "256"], "--sinks"), (["--models", "gpt3"], "--models"), (["--modes", "sample"], "--modes"),
])  # fmt: skip
def test_bad_settings_name_the_flag(flags, message):
    with pytest.raises(ValueError, match=message):
        budget.settings_of(budget.build_parser().parse_args(flags))


def test_a_worker_run_holds_what_was_fitted_and_the_report_says_so(tmp_path):
    """One planned bounded run and one unbounded run of the quick bench model, in this process; then the report."""
    layout = budget_fit.KVLayout(**budget_run.probe({"model": "bench", "shape": "quick", "seed": 0})["layout"])
    jobs = budget.plan(settings(budget_bytes=4 * 2**20, new_tokens=24, prompt_tokens=4, limit=8), {"bench": layout})
    records = []
    for job in jobs:
        if job["mode"] == "beams" and job["limit"] is None:
            continue  # the report must cope with a missing run too
        result = budget_run.run_one(job)
        assert result["kv_bytes_end"] == result["kv_bytes_most"] == job["predicted_kv_bytes"]
        assert result["sequences_out"] == job["batch"] * job["num_beams"] if job["mode"] == "batch" else True
        records.append(json.loads(json.dumps(result)))
    records.append({**records[0], "rows": 0, "mode": "batch", "model": "other"})
    del records[-1]["kv_bytes_end"]  # a planned cache of which no row fits
    text = budget_report.write_report(records, tmp_path)
    assert text.count("| yes |") == 3 and "**NO**" not in text
    assert "not run: no row fits" in text
    assert "bench, 4 MiB of KV and 24 new tokens: batch" in text and "x the aggregate tokens/s" in text
    data = json.loads((tmp_path / "budget.json").read_text())
    head = next(entry for entry in data["headlines"] if entry["mode"] == "batch")
    assert head["rows_bounded"] > head["rows_unbounded"]
    assert (tmp_path / "budget.png").stat().st_size > 0


def test_the_report_flags_a_run_that_held_other_bytes(tmp_path):
    run = {"model": "bench", "mode": "batch", "limit": 8, "sinks": 0, "rows": 2, "budget": 100, "new_tokens": 4,
           "predicted_row_bytes": 40, "predicted_kv_bytes": 80, "kv_bytes_end": 96, "kv_bytes_most": 96,
           "peak_rss_bytes": 2**20, "rss_before_bytes": 0, "tokens_per_second": 1.0, "seconds": 8.0}  # fmt: skip
    assert "**NO**" in budget_report.write_report([run], tmp_path)
