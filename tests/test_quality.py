"""The quality benchmark measures what it says: teacher-forced NLL through `generate` (`cachelimit.quality`)
equals the NLL of the same text under an independent reference, on a tiny seeded model (no download)."""

from __future__ import annotations

import json
import math

import pytest
import torch

import cachelimit
from cachelimit.bench import quality, quality_report
from tests.common import VOCAB, build_tiny_model
from tests.reference import banded_logits, banded_visibility
from tests.sink_reference import StreamingReference

LENGTH = 40


@pytest.fixture(scope="module")
def model():
    return build_tiny_model("llama", layers=3)


@pytest.fixture(scope="module")
def text():
    return torch.randint(1, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(1))


def nll_of(logits: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """-log p(text[t + 1] | logits of position t), positions 0 .. len - 2."""
    return -torch.log_softmax(logits[0, :-1].float(), -1).gather(-1, text[0, 1:, None])[:, 0]


def test_dense_equals_one_forward(model, text):
    measured = torch.tensor(quality.teacher_forced_nll(model, text))
    with torch.no_grad():
        expected = nll_of(model(text).logits, text)
    torch.testing.assert_close(measured, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("limit", [4, 9])
def test_window_equals_banded_reference(model, text, limit):
    measured = torch.tensor(quality.teacher_forced_nll(model, text, cache_limit=limit))
    mask = torch.ones_like(text)
    expected = nll_of(banded_logits(model, text, mask, banded_visibility(mask, limit)), text)
    torch.testing.assert_close(measured, expected, atol=1e-5, rtol=0)
    with torch.no_grad():
        dense = nll_of(model(text).logits, text)
    assert (measured - dense).abs().max() > 1e-3  # the window is really on (the comparison above can fail)


def test_sinks_equal_streaming_reference(model, text):
    limit, sinks = 6, 2
    measured = torch.tensor(quality.teacher_forced_nll(model, text, cache_limit=limit, num_sink_tokens=sinks))
    reference = StreamingReference(model, limit, sinks)
    try:
        logits = torch.stack([reference.feed(text[:, i : i + 1])[-1] for i in range(LENGTH)])[None]
    finally:
        reference.close()
    torch.testing.assert_close(measured, nll_of(logits, text), atol=1e-4, rtol=0)


def test_force_text_sees_the_raw_logits(model, text):
    """Alone in the list of a greedy run, the processor is handed what `output_logits=True` reports."""
    force = quality.ForceText(text)
    out = model.generate(
        text[:, :1],
        max_new_tokens=LENGTH - 1,
        do_sample=False,
        logits_processor=[force],
        return_dict_in_generate=True,
        output_logits=True,
    )
    assert torch.equal(out.sequences, text)
    raw = torch.stack(out.logits, 1)
    expected = -torch.log_softmax(raw[0].float(), -1).gather(-1, text[0, 1:, None])[:, 0]
    torch.testing.assert_close(torch.stack(force.nll), expected, atol=0, rtol=0)


def test_report_tables_and_json(tmp_path):
    runs = [
        {"kind": "chunked", "name": "dense", "cache_limit": None, "num_sink_tokens": None, "nll": [1.0] * 600,
         "seconds": 1.0, "source": "x"},
        {"kind": "chunked", "name": "window L=64", "cache_limit": 64, "num_sink_tokens": None, "nll": [2.0] * 600,
         "seconds": 1.0, "source": "x"},
    ]  # fmt: skip
    text = quality_report.write_report(runs, tmp_path)
    assert "| 1-512 | 2.72 | 7.39 |" in text and "| 513-600 |" in text
    data = json.loads((tmp_path / "quality.json").read_text())
    assert data["summary"]["window L=64"]["perplexity_after_window_fills"] == pytest.approx(7.389, abs=1e-3)
    assert (tmp_path / "quality_nll.png").stat().st_size > 0
    assert quality_report.moving_average([1.0, 3.0, 5.0], 2) == [1.0, 2.0, 4.0]


@pytest.mark.parametrize("window", [{}, {"cache_limit": 5}, {"cache_limit": 6, "num_sink_tokens": 2}])
def test_chunked_path_equals_decode_path(model, text, window):
    """The cheap path (the text as a chunked prompt) gives the decode path's numbers, for any chunk size: smaller
    than the limit, larger than it, and the whole text at once."""
    decoded = torch.tensor(quality.teacher_forced_nll(model, text, **window))
    for chunk in (1, 7, 16, LENGTH):
        chunked = torch.tensor(quality.chunked_nll(model, text, chunk=chunk, **window))
        torch.testing.assert_close(chunked, decoded, atol=1e-4, rtol=0)


def test_report_runs_of_different_lengths_past_the_context(tmp_path):
    """A dense run shorter than the bounded ones leaves its cells past its end empty; positions past the model's
    context are summarised apart (position p is predicted by the query at p - 1: p <= context is inside)."""
    dense = [1.0] * 5 + [3.0] * 5  # 10 positions, context 5: 1.0 inside, 3.0 past
    window = [1.5] * 700
    runs = [
        {"kind": "chunked", "name": "dense", "cache_limit": None, "num_sink_tokens": None, "nll": dense,
         "seconds": 2.0, "cpu_seconds": 1.0, "kv_bytes": 3 << 20, "context": 5, "source": "x"},
        {"kind": "chunked", "name": "window L=4", "cache_limit": 4, "num_sink_tokens": None, "nll": window,
         "seconds": 200.0, "cpu_seconds": 100.0, "kv_bytes": 1 << 20, "context": 5, "source": "x"},
    ]  # fmt: skip
    text = quality_report.write_report(runs, tmp_path)
    assert "| 1-512 | 7.39 | 4.48 |" in text  # exp(mean of five 1.0 and five 3.0) = exp(2); exp(1.5)
    assert "| 513-700 |  | 4.48 |" in text  # the dense run stopped at 10 positions
    assert "| dense | 10 | 7.39 | 2.72 | 20.09 | 3.0 MiB | 2 s (1 s) |" in text
    summary = json.loads((tmp_path / "quality.json").read_text())["summary"]
    assert summary["window L=4"]["perplexity_within_context"] == pytest.approx(math.exp(1.5))
    assert summary["window L=4"]["dense_perplexity_same_positions"] == pytest.approx(math.exp(16 / 6))  # dense[4:]
    assert summary["window L=4"]["tokens_per_second"] == pytest.approx(701 / 200.0)


def test_report_scales_follow_the_length():
    assert quality_report.scales([{"nll": [0.0] * 8192}]) == (512, 256)
    assert quality_report.scales([{"nll": [0.0] * 8193}]) == (2048, 1024)


def test_a_stopped_run_leaves_the_positions_it_scored(model, text, tmp_path):
    """A long chunked run keeps its scored positions in OUT/quality_partial.json as it goes; they equal the whole
    run's first positions, and the report names the run as stopped (never as the whole text)."""
    window = {"cache_limit": 6, "num_sink_tokens": 2}
    job = {"key": "chunked sinks L=6, S=2", "name": "sinks L=6, S=2", "kind": "chunked", "chunk": 7, **window}
    path = tmp_path / quality.PARTIAL
    seen = []

    def stop_after_three(scored, cache):
        keeper(scored, cache)
        seen.append(sum(part.shape[0] for part in scored))
        if len(seen) == 3:
            raise KeyboardInterrupt  # the run is stopped after its third forward

    keeper = quality.PartialRun(path, job, every=1)
    with pytest.raises(KeyboardInterrupt):
        quality.chunked_scores(model, text, 7, progress=None, on_scored=stop_after_three, **window)
    whole = quality.chunked_scores(model, text, 7, **window).nll
    record = json.loads(path.read_text())
    assert seen == [7, 14, 21] and record["partial"] and len(record["nll"]) == 21
    assert record["nll"] == pytest.approx(whole[:21], abs=1e-5) and record["kv_bytes"] > 0
    (stopped,) = quality.partial_records(tmp_path, done={})
    assert stopped["name"] == "sinks L=6, S=2 (stopped after 21 positions)"
    assert quality.partial_records(tmp_path, done={job["key"]: {}}) == []  # the run finished since


def test_scored_policy_runs_equal_the_slow_reference_replay(text):
    """`bench --quality --policy keydiff --protected R`: its bounded runs are keydiff's, as planned from the flags
    and run by `run_job` (decode and chunked), and the decode run's NLL is the replay of the slow reference's
    evictions (`tests.scored_reference`: the paper's score recomputed from the full history, one forward of the
    unpatched model with per-head masks). The window's NLL must differ, so the comparison can fail."""
    from tests.scored_reference import replay_logits, slow_keydiff

    model = build_tiny_model("llama", layers=3).double()
    argv = ["--policy", "keydiff", "--protected", "3", "--limits", "12", "--sample-tokens", "0", "--chunk", "8"]
    jobs = {job["key"]: job for job in quality._jobs(quality.build_parser().parse_args(argv), [12])}
    assert set(jobs) == {f"{kind} {name}" for kind in ("chunked", "nll") for name in
                         ("dense", "keydiff L=12", "keydiff L=12, S=4")}  # fmt: skip
    job = {**jobs["nll keydiff L=12, S=4"], "tokens": LENGTH}
    with cachelimit.patched("llama"):
        nll = torch.tensor(quality.run_job(job, model, None, text, None)["nll"], dtype=torch.float64)
        window = quality.run_job({**job, "policy": None}, model, None, text, None)["nll"]
        chunked = quality.run_job({**jobs["chunked keydiff L=12, S=4"], "tokens": LENGTH}, model, None, text, None)
    kept, gap = slow_keydiff(model, text, torch.ones_like(text), 1, limit=12, sinks=4, protected=3)
    assert gap > 1e-9, f"the reference met a tie ({gap:.2e})"
    expected = nll_of(replay_logits(model, text, torch.ones_like(text), 1, kept), text).double()
    torch.testing.assert_close(nll, expected, rtol=0, atol=1e-4)
    assert (torch.tensor(window, dtype=torch.float64) - expected).abs().max() > 1e-2
    assert len(chunked["nll"]) == LENGTH - 1 and chunked["policy"] == "keydiff"
