"""Property tests: random batches, paddings, limits, prompt lengths and chunk sizes, every representative family
(those whose test declaration runs the full matrix; see tests/declarations.py).

Each example checks a bounded run against the banded reference (tests.reference) and against its own
rows run alone, so the fixed grids of the per-family tests are not the only shapes ever exercised.
"""

from __future__ import annotations

from functools import cache

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cachelimit.hf import compat
from tests.common import build_tiny_model, left_padded_batch, returned_cache
from tests.declarations import has_native_window_oracle, representative_families
from tests.growth_spec import forward_widths, ring_capacities
from tests.reference import generated_step_logits

ATOL = 1e-5


@cache
def tiny_model(family: str, attn: str, window: int | None = None):
    """`window`: the model's native sliding_window (None for families without one)."""
    return build_tiny_model(family, attn, layers=2, **({"sliding_window": window} if window else {}))


runs = st.fixed_dictionaries(
    {
        "family": st.sampled_from(representative_families()),
        "attn": st.sampled_from(["eager", "sdpa"]),
        "lengths": st.lists(st.integers(1, 20), min_size=1, max_size=3),
        "limit": st.integers(1, 12),
        "chunk": st.none() | st.integers(1, 8),
        "new": st.integers(1, 6),
        "seed": st.integers(0, 2**16),
        "window": st.none() | st.integers(2, 14),  # native sliding_window (families with one): the smaller wins
    }
)


def model_for(run: dict):
    return tiny_model(run["family"], run["attn"], run["window"] if has_native_window_oracle(run["family"]) else None)


def bounded_run(run: dict, ids: torch.Tensor, mask: torch.Tensor):
    # 4.x cannot chunk a one-token prompt (refused: tests/test_bad_input.py)
    assume(not (run["chunk"] and ids.shape[1] == 1 and compat.CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN))
    return model_for(run).generate(
        ids,
        attention_mask=mask,
        cache_limit=run["limit"],
        prefill_chunk_size=run["chunk"],
        max_new_tokens=run["new"],
        do_sample=False,
        return_dict_in_generate=True,
        output_logits=True,
    )


@settings(max_examples=100, deadline=None)
@given(run=runs)
def test_bounded_generation_equals_banded_reference(run):
    model = model_for(run)
    ids, mask = left_padded_batch(run["lengths"], seed=run["seed"])
    output = bounded_run(run, ids, mask)
    window = model.config.sliding_window if has_native_window_oracle(run["family"]) else None
    limit = run["limit"] if window is None else min(run["limit"], window - 1)
    expected = generated_step_logits(model, output.sequences, mask, limit, window_prefill=run["chunk"] is not None)
    torch.testing.assert_close(torch.stack(output.logits, 1), expected, atol=ATOL, rtol=0)
    # after the run the cache holds the last min(real tokens seen, L) positions of every row (the newest
    # generated token is not in it yet: it would be written by the next forward)
    seen = torch.tensor(run["lengths"]) + run["new"] - 1
    kept = returned_cache(output).kept_lengths()
    assert torch.equal(kept, seen.clamp(max=limit)), (kept, seen, limit)
    # the ring grows with what it holds, up to L + 1 slots (tests/growth_spec.py)
    slots = ring_capacities(forward_widths(ids.shape[1], run["chunk"], run["new"]), limit + 1)[-1]
    assert all(layer.keys.shape[-2] == slots for layer in returned_cache(output).layers)


@settings(max_examples=60, deadline=None)
@given(run=runs)
def test_left_padded_rows_equal_their_solo_runs(run):
    ids, mask = left_padded_batch(run["lengths"], seed=run["seed"])
    batch = bounded_run(run, ids, mask)
    logits = torch.stack(batch.logits, 1)
    for row, length in enumerate(run["lengths"]):
        solo_ids = ids[row : row + 1, ids.shape[1] - length :]
        solo = bounded_run(run, solo_ids, torch.ones_like(solo_ids))
        assert torch.equal(batch.sequences[row, ids.shape[1] - length :], solo.sequences[0])
        torch.testing.assert_close(logits[row], torch.stack(solo.logits, 1)[0], atol=ATOL, rtol=0)
