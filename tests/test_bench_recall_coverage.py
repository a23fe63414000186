"""The issue's grid in `bench --recall`: its defaults are the grid, and `bench.recall_coverage` counts how many of
the grid's cells the journal fills (hand-derived counts, no model)."""

from __future__ import annotations

import pytest

from cachelimit.bench import recall, recall_coverage, recall_report
from cachelimit.bench.recall_run import VARIANTS

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


def test_the_defaults_are_the_issues_grid():
    args = recall.build_parser().parse_args([])
    assert args.lengths == [1024, 2048, 4096] and args.depths == [10, 50, 90] and args.n == 20
    assert args.budgets == [64, 128, 256, 512, 1024] and args.prefill == ["whole", "chunked"]
    assert args.cases == ["passkey", "text", "chat", "ppl"] and args.ppl_tokens is None  # the whole text
    assert args.variants == ["unbounded", "window", "window+sinks", "keydiff", "tova", "snapkv", "oracle"]
    jobs = recall.plan(args)
    passkey = [job for job in jobs if job["case"] == "passkey"]
    # per cell (length, depth, prefill): 20 trials x (1 unbounded + 6 bounded variants x 5 budgets)
    assert len(passkey) == 3 * 3 * 2 * 20 * (1 + 6 * 5)
    assert len({recall.trial_key(job) for job in jobs}) == len(jobs)
    ppl = [job for job in jobs if job["case"] == "ppl"]
    assert {job["variant"] for job in ppl} == set(VARIANTS) - {"oracle"} and len(ppl) == 1 + 5 * 5


def _grid_records(model, case, length, prefill, keys=20):
    return [
        {"model": model, "case": case, "length": length, "prefill": prefill, "depth": depth, "variant": variant,
         "budget": budget, "trial": trial, "correct": trial % 2 == 0, "protected": None}
        for depth, variant, budget in recall_coverage.grid_cells(case, prefill)
        for trial in range(keys)
    ]  # fmt: skip


def _coverage_of(records, model="smollm2"):
    return {(case, length): done for case, length, done in recall_coverage.coverage(records, model)}


def test_coverage_counts_the_grids_cells_with_20_keys_each():
    whole = _grid_records("smollm2", "passkey", 1024, "whole")
    assert len({(r["depth"], r["variant"], r["budget"]) for r in whole}) == 3 * (6 * 5 + 1)
    assert _coverage_of(whole)[("passkey", 1024)] == {"whole": (93, 93), "chunked": (0, 90)}
    short = whole[1:]  # one cell with 19 keys, right or wrong alike
    protected = [{**r, "protected": 128} for r in whole]  # a --protected run is not the policy's default
    assert _coverage_of(short)[("passkey", 1024)]["whole"] == (92, 93)
    assert _coverage_of(short + protected)[("passkey", 1024)]["whole"] == (92, 93)
    unbounded_chunked = [{**r, "prefill": "chunked"} for r in whole if r["variant"] == "unbounded"]
    rest = [r for r in whole if r["variant"] != "unbounded"]
    assert _coverage_of(rest)[("passkey", 1024)]["whole"] == (90, 93)
    assert _coverage_of(rest + unbounded_chunked)[("passkey", 1024)]["whole"] == (93, 93)  # it attends the same
    chat = _grid_records("smollm2", "chat", 2048, "chunked")
    assert _coverage_of(chat)[("chat", 2048)] == {"whole": (0, 31), "chunked": (30, 30)}
    assert len(_coverage_of([])) == 9 and len(_coverage_of([], "gemma3")) == 6  # a base model: no chat case
    table = recall_coverage.coverage_table({"smollm2": whole + chat}, recall_report.MODEL_NAMES)
    assert "| SmolLM2-135M-Instruct | pass key | 1,024 | 93/93 | 0/90 |" in table
    whole_cells, chunked_cells = 6 * 93 + 3 * 31, 6 * 90 + 3 * 30  # pass key and text at 3 lengths, chat at 3 gaps
    assert f"| all | | | 93/{whole_cells} | 30/{chunked_cells} |" in table
    assert f"123 of the grid's {whole_cells + chunked_cells} cells hold 20 or more keys." in table
