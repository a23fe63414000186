"""`cachelimit bench --recall`: its flags, prompts, scoring rule, oracle keep-set and report (no model, fast), and
one end-to-end run of every case and variant on the built-in tiny model (n=1), resumed."""

from __future__ import annotations

import json

import pytest
import torch
from parameterized import parameterized

from cachelimit.bench import recall, recall_report
from cachelimit.bench.recall_oracle import OracleCache, oracle_generate
from cachelimit.bench.recall_prompts import (
    FILLER,
    HEADER,
    PASS_KEY_NEEDLE,
    PASS_KEY_QUESTION,
    fact_span,
    pass_key_header_length,
    pass_key_prompt,
    score_answer,
    text_prompt,
    trial_key,
)
from cachelimit.bench.recall_run import VARIANTS
from cachelimit.cli.main import run
from cachelimit.cli.tiny_model import build_tiny_model, build_tokenizer
from cachelimit.families.patching import patch
from tests.reference import banded_logits

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

BAD = [
    (["--depths", "101"], "argument --depths: must be an int in [0, 100], got 101"),
    (["--cases", "passkey,nope"], "argument --cases: expected names from passkey, text, chat, ppl, got"),
    (["--variants", "h2o"], "argument --variants: expected names from unbounded, window"),
    (["--n", "0"], "argument --n: must be an int in [1, "),
    (["--budgets", "64,4"], "argument --budgets: the variants with 4 sinks need budgets > 4, got 4"),
    (["--lengths", "32"], "argument --lengths: a prompt needs room for its header, key and question (>= 64)"),
    (["--prefill", "half"], "argument --prefill: expected names from whole, chunked"),
    (["--ppl-tokens", "1"], "argument --ppl-tokens: must be `all` or an int in [2, "),
    (["--model", "gemma3"], "argument --cases: the chat case needs a chat model; 'gemma3' is a base model"),
    (["--model", "gemma2"], "argument --model: invalid choice: 'gemma2'"),
]


@parameterized.expand(BAD)
def test_a_bad_flag_is_one_line_and_exit_2(argv, expected):
    import contextlib
    import io
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stderr(io.StringIO()) as err:
        out = Path(folder) / "out"
        assert run(["bench", "--recall", *argv, "--out", str(out)]) == 2
        assert not out.exists()  # nothing ran, nothing was written
    text = err.getvalue()
    assert text.startswith("cachelimit bench --recall: error: ") and expected in text, text
    assert text.count("\n") == 1 and "Traceback" not in text


TOKENIZER = build_tokenizer()


@parameterized.expand([(length, depth) for length in (300, 700) for depth in (0.1, 0.5, 0.9)])
def test_the_pass_key_sits_at_its_depth_in_a_prompt_of_the_length_asked(length, depth):
    prompt = pass_key_prompt(TOKENIZER, length, depth, seed=3, trial=2)
    assert len(prompt.ids) == length
    start, end = prompt.needle
    question = TOKENIZER(PASS_KEY_QUESTION, add_special_tokens=False)["input_ids"]
    header = TOKENIZER(HEADER, add_special_tokens=False)["input_ids"]
    haystack = length - len(question) - len(header) - (end - start)  # the filler's tokens
    assert start - len(header) == round(depth * haystack)  # the needle's depth in the filler
    assert prompt.ids[: len(header)] == header and prompt.ids[-len(question) :] == question
    assert pass_key_header_length(TOKENIZER) == len(header)  # what the header probe keeps as sinks
    assert TOKENIZER.decode(prompt.ids[start:end]) == PASS_KEY_NEEDLE.format(key=prompt.key)
    assert (FILLER * 100).startswith(TOKENIZER.decode(prompt.ids[len(header) : start]))  # filler up to the needle
    assert len(prompt.key) == 5 and prompt.key.isdigit()
    assert pass_key_prompt(TOKENIZER, length, depth, seed=3, trial=2) == prompt  # deterministic


def test_trials_draw_different_keys_and_text_offsets():
    keys = {pass_key_prompt(TOKENIZER, 300, 0.5, seed=0, trial=trial).key for trial in range(20)}
    assert len(keys) >= 18
    text = list(range(1000, 6000))
    first, second = (text_prompt(TOKENIZER, text, 400, 0.5, 0, trial) for trial in (0, 1))
    assert len(first.ids) == len(second.ids) == 400 and first.ids[150:160] != second.ids[150:160]
    start, end = first.needle
    assert first.key in TOKENIZER.decode(first.ids[start:end])


@parameterized.expand(
    [
        ("is 12345.", True),
        (" 12345", True),
        ("12345 is the pass key", True),
        ("1234", False),
        ("123456", False),
        ("12 345", False),
        ("no digits", False),
        ("7 then 12345", False),  # the first run of digits counts
    ]
)
def test_the_scoring_rule(answer, right):
    assert score_answer(answer, "12345") is right


def test_the_key_of_a_trial_is_seeded():
    assert trial_key(0, "passkey", 1024, 0.5, 0)[0] == trial_key(0, "passkey", 1024, 0.5, 0)[0]
    assert trial_key(0, "passkey", 1024, 0.5, 0)[0] != trial_key(1, "passkey", 1024, 0.5, 0)[0]


def test_fact_span_covers_the_fact():
    text = "User: Please remember this: my code is 12345. Thanks\nAssistant: "
    ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
    start, end = fact_span(TOKENIZER, text, ids, "my code is 12345.")
    assert TOKENIZER.decode(ids[start:end]) == "my code is 12345."


def _tiny():
    patch("llama")
    return build_tiny_model()


def test_the_oracle_keep_set_is_sinks_fact_and_the_most_recent():
    model, _ = _tiny()
    oracle = OracleCache(model, limit=10, sinks=2, pinned={5, 6})
    oracle.columns = list(range(20))
    assert [oracle.columns[slot] for slot in oracle.keep()] == [0, 1, 5, 6, 14, 15, 16, 17, 18, 19]
    with pytest.raises(ValueError, match="budget 4 is too small"):
        OracleCache(model, limit=4, sinks=2, pinned={5, 6})


WINDOW = 16  # the tiny Gemma 3's sliding window: the prompts below are longer


def _tiny_gemma3():
    """Gemma 3's layer mix (sliding and full), the model the benchmark's second real model has."""
    from tests.common import build_tiny_model as build_family_model

    return build_family_model(
        "gemma3_text", layer_types=("sliding_attention", "full_attention"), query_pre_attn_scalar=8,
        sliding_window=WINDOW,
    )  # fmt: skip


def _oracle_model(family: str):
    """The model and the token ids a random prompt draws from (below the model's vocabulary)."""
    from tests.common import VOCAB

    return (_tiny()[0], (40, 120)) if family == "llama" else (_tiny_gemma3(), (3, VOCAB))


@parameterized.expand([("llama",), ("gemma3_text",)])
def test_the_oracle_equals_unbounded_greedy_when_nothing_is_cut(family):
    model, (low, high) = _oracle_model(family)
    ids = torch.randint(low, high, (1, 50), generator=torch.Generator().manual_seed(0))
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    got = oracle_generate(OracleCache(model, 100, 4, {20, 21}), ids[0].tolist(), 8)
    assert got == expected[0, 50:].tolist()


@parameterized.expand([("llama", None), ("llama", 16), ("gemma3_text", None), ("gemma3_text", 16)])
def test_the_oracle_equals_an_explicit_mask_reference_when_it_cuts(family, chunk):
    """Each query reads what the keep-set held before its forward, plus its own forward's tokens causally (a whole
    prompt: all of it), computed independently as a 4D mask over one cache-free forward; a sliding layer only the
    keys of those within its window."""
    model, (low, high) = _oracle_model(family)
    prompt, new, limit, sinks, pinned = 60, 6, 20, 4, {30, 31, 32}
    ids = torch.randint(low, high, (1, prompt), generator=torch.Generator().manual_seed(1))
    got = oracle_generate(OracleCache(model, limit, sinks, pinned), ids[0].tolist(), new, chunk)
    sequence = torch.cat([ids, torch.tensor([got])], dim=1)
    width = sequence.shape[1]

    def kept_before(column: int) -> set[int]:  # the keep-set over columns < `column`
        held = [c for c in range(column) if c < sinks or c in pinned]
        rest = [c for c in range(column) if c not in held]
        return set(held) | set(rest[len(rest) - (limit - len(held)) :] if limit > len(held) else [])

    forwards = [(start, min(start + (chunk or prompt), prompt)) for start in range(0, prompt, chunk or prompt)]
    forwards += [(column, column + 1) for column in range(prompt, width)]
    visible = torch.zeros(1, width, width, dtype=torch.bool)
    for start, end in forwards:
        past = kept_before(start) if start > limit else set(range(start))
        for query in range(start, end):
            for key in list(past) + list(range(start, query + 1)):
                visible[0, query, key] = True
    if family == "llama":
        visibility = visible
    else:
        distance = torch.arange(width)[:, None] - torch.arange(width)[None]
        visibility = {"full_attention": visible, "sliding_attention": visible & (distance < WINDOW)[None]}
    logits = banded_logits(model, sequence, torch.ones_like(sequence), visibility)[0, prompt - 1 : -1]
    suppressed = model.generation_config.suppress_tokens
    if suppressed:
        logits[:, suppressed] = float("-inf")  # as generate and the oracle do
    assert logits.argmax(-1).tolist() == got
    wrong = {kind: mask.clone() for kind, mask in visibility.items()} if family != "llama" else visible.clone()
    for mask in wrong.values() if isinstance(wrong, dict) else [wrong]:
        mask[0, prompt:, 30:33] = False  # dropping the pinned fact changes what the model reads
    assert not torch.allclose(banded_logits(model, sequence, torch.ones_like(sequence), wrong)[0, -1], logits[-1])
    if family != "llama":  # and so does reading it past the sliding window
        unbounded_sliding = {**visibility, "sliding_attention": visible}
        assert not torch.allclose(
            banded_logits(model, sequence, torch.ones_like(sequence), unbounded_sliding)[0, -1], logits[-1]
        )


FAKE = [
    {"case": "passkey", "length": 1024, "depth": 50, "trial": t, "prefill": "whole", "variant": v, "budget": b,
     "correct": ok, "chunk": None}
    for t, (v, b, ok) in enumerate(
        [("window", 128, True), ("window", 128, False), ("keydiff", 128, True), ("keydiff", 128, True),
         ("unbounded", None, True), ("unbounded", None, True), ("oracle", 128, None)]
    )
]  # fmt: skip
FAKE[-1]["error"] = "budget too small"


def test_the_report_counts_right_over_n_per_cell(tmp_path):
    text = recall_report.write_report(FAKE, tmp_path)
    table = (tmp_path / recall_report.TABLES).read_text()
    assert "| window | 1/2 (50 %) | - |" in table
    assert "| keydiff | 2/2 (100 %) | - |" in table
    assert "| unbounded | - | 2/2 (100 %) |" in table
    assert "| oracle | - | - |" in table and "1 trials not served (no verdict): budget too small" in table
    assert "- L=128: window 1/2 (50 %), keydiff 2/2 (100 %)" in table
    assert (tmp_path / recall_report.PLOT).stat().st_size > 1000 and "Plot:" in text


def test_the_report_splits_trials_by_depth_where_there_are_several(tmp_path):
    deep = [{**record, "depth": 90, "trial": 10 + record["trial"], "correct": True} for record in FAKE[:2]]
    table = recall_report.markdown(FAKE + deep)
    assert "| window | 3/4 (75 %) | - |" in table  # the accuracy table: every depth together
    assert "| variant | L=128, 50 % | L=128, 90 % | no limit, 50 % |" in table  # only columns with trials
    assert "| window | 1/2 (50 %) | 2/2 (100 %) | - |" in table
    assert "| keydiff | 2/2 (100 %) | - | - |" in table
    assert "By depth" not in recall_report.markdown(FAKE)  # one depth: nothing to split


def test_a_budget_curve_compares_only_the_depths_every_budget_has():
    deep = [{**record, "depth": 90, "trial": 10 + record["trial"]} for record in FAKE]
    wider = [{**record, "budget": 256, "trial": 20 + record["trial"]} for record in FAKE + deep if record["budget"]]
    unbounded_deep = [record for record in deep if record["budget"] is None]
    members, depths = recall_report.comparable(FAKE + unbounded_deep + wider)  # 128: depth 50 only; 256: 50, 90
    assert depths == [50] and {record["depth"] for record in members} == {50}
    assert sum(record["variant"] == "unbounded" for record in members) == 2  # the unbounded line at 50 % too
    assert recall_report.comparable(FAKE + deep) == (FAKE + deep, [])  # every budget has both: nothing left out
    apart = FAKE + [record for record in wider if record["depth"] == 90]  # 128 at 50 only, 256 at 90 only
    assert recall_report.comparable(apart) == (apart, [])  # nothing in common: pooled, as the tables do


def test_a_torn_journal_line_is_skipped_and_a_trial_counts_once(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (FAKE[0], FAKE[1], {**FAKE[0], "seconds": 2})) + '{"ca')
    assert recall.read_journal(path) == [FAKE[0], FAKE[1]]


def test_every_case_and_variant_runs_end_to_end_on_the_tiny_model_and_resumes(tmp_path, capsys):
    argv = ["bench", "--recall", "--model", "tiny", "--n", "1", "--lengths", "300", "--depths", "50",
            "--budgets", "100", "--chat-gaps", "40", "--turn-tokens", "40", "--turn-answer-tokens", "3",
            "--answer-tokens", "4", "--ppl-tokens", "200", "--ppl-chunk", "64", "--chunk", "64",
            "--out", str(tmp_path)]  # fmt: skip
    assert run(argv) == 0
    records = recall.read_journal(tmp_path / recall.JOURNAL)
    seen = {(r["case"], r["prefill"], r["variant"]) for r in records}
    for case in ("passkey", "text", "chat"):
        for prefill in ("whole", "chunked"):
            assert {(case, prefill, variant) for variant in VARIANTS} <= seen, (case, prefill)
    assert {("ppl", "chunked", variant) for variant in VARIANTS if variant != "oracle"} <= seen
    # the one refusal a release may give: chunked turns continuing a returned cache need transformers >= 5.21
    # (there the trial is recorded with the refusal and no verdict, never as a wrong answer)
    refused = [r for r in records if r.get("error")]
    assert all(r["case"] == "chat" and r["prefill"] == "chunked" for r in refused), [r["error"] for r in refused]
    assert all("`prefill_chunk_size` when continuing" in r["error"] and r["correct"] is None for r in refused)
    assert all(isinstance(r["correct"], bool) for r in records if r["case"] != "ppl" and not r.get("error"))
    assert all(r["prompt_tokens"] == 300 for r in records if r["case"] in ("passkey", "text"))
    unbounded = {r["case"]: r["perplexity"] for r in records if r["case"] == "ppl" and r["variant"] == "unbounded"}
    window = [r["perplexity"] for r in records if r["case"] == "ppl" and r["variant"] == "window"]
    assert unbounded["ppl"] != window[0]  # 200 tokens through a budget of 100: the window cut
    assert (tmp_path / recall_report.TABLES).is_file() and (tmp_path / recall_report.PLOT).is_file()
    capsys.readouterr()
    assert run(argv) == 0  # resumed: every trial is in the journal, nothing runs again
    assert "trials to do" not in capsys.readouterr().out
    assert len(recall.read_journal(tmp_path / recall.JOURNAL)) == len(records)
