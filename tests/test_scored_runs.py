"""Scored policies (issue 25) beyond the per-step references of `tests/test_scored_policy.py`: what a run must equal
as a whole (the window, when every position but one is protected; one call, when a returned cache continues), beam
search scored by the references, and the arguments refused before any token."""

from __future__ import annotations

import pytest
import torch

import cachelimit
from cachelimit.core.eviction import KeyDiff
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.common import returned_cache
from tests.scored_reference import replay_logits, slow_keydiff
from tests.test_scored_policy import EAGER_DISPATCHED, TIE, prompt, tiny_llama


@pytest.mark.skipif(EAGER_DISPATCHED, reason="this release dispatches eager attention: served (TestTovaEager)")
def test_eager_refused_there():
    """Where transformers calls eager attention directly, a query-scored policy cannot see the queries: refused
    before any token, naming the implementations that work."""
    model = tiny_llama("eager", torch.float32)
    ids, mask = prompt(1, 12)
    with cachelimit.patched("llama"), pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        model.generate(ids, attention_mask=mask, max_new_tokens=3, cache_limit=8, cache_policy="tova", pad_token_id=0)


def greedy(model, ids, mask, new_tokens: int, **options):
    """A greedy bounded run at L = 8 that returns its logits (`options`: the policy, a cache to continue, ...)."""
    return model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
        **{"cache_limit": 8, **options},
    )


def test_protected_window_is_the_window():
    """With every position but one protected (`protected = L - S`), KeyDiff must keep exactly the window with sinks:
    the same logits as the window policy (which, without RoPE sink moves, is a plain cut)."""
    model = tiny_llama()
    ids, mask = prompt(2, 9, (0, 3))
    with cachelimit.patched("llama"):
        window = greedy(model, ids, mask, 20)
        scored = greedy(model, ids, mask, 20, cache_policy=KeyDiff(protected=8))
    torch.testing.assert_close(torch.stack(scored.logits), torch.stack(window.logits), rtol=0, atol=1e-9)


def test_beams_score_what_the_references_score():
    """Beam search reorders the rows every step: each returned beam's score (the sum of its tokens' log
    probabilities, length_penalty=0) must be what the replay gives it when each layer and head hides what the slow
    reference evicts for that beam's own token history."""
    model = tiny_llama()
    ids, mask = prompt(1, 10)
    with cachelimit.patched("llama"):
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=12,
            min_new_tokens=12,
            num_beams=3,
            num_return_sequences=3,
            do_sample=False,
            length_penalty=0.0,
            cache_limit=8,
            cache_policy="keydiff",
            return_dict_in_generate=True,
            output_scores=True,
            pad_token_id=0,
        )
    width = ids.shape[1]
    for row, sequence in enumerate(out.sequences):
        sequence = sequence[None]
        full_mask = torch.ones_like(sequence)
        reference, gap = slow_keydiff(model, sequence, full_mask, width, limit=8, sinks=0, protected=4)
        assert gap > TIE[torch.float64]
        logits = replay_logits(model, sequence, full_mask, width, reference)
        logprobs = logits[0, width - 1 : -1].log_softmax(-1)
        total = logprobs.gather(-1, sequence[0, width:, None]).sum()
        torch.testing.assert_close(out.sequences_scores[row].double(), total, rtol=0, atol=1e-5)


def test_continuation_matches_one_call():
    """A returned scored cache continues exactly: two calls give the tokens and logits of one."""
    model = tiny_llama()
    ids, mask = prompt(2, 10, (0, 2))
    with cachelimit.patched("llama"):
        whole = greedy(model, ids, mask, 24, cache_policy="keydiff")
        first = greedy(model, ids, mask, 12, cache_policy="keydiff")
        more_mask = torch.cat([mask, torch.ones(2, 12, dtype=mask.dtype)], 1)
        # continued without restating the limit or the policy: the returned cache carries them
        second = greedy(
            model, first.sequences, more_mask, 12, cache_limit=None, **{CACHE_ARGUMENT: returned_cache(first)}
        )
    torch.testing.assert_close(second.sequences, whole.sequences)
    torch.testing.assert_close(torch.stack(second.logits), torch.stack(whole.logits[12:]), rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (dict(cache_policy="h2o"), ValueError, "`cache_policy` must be one of 'window', 'keydiff'"),
        (dict(cache_policy=3), TypeError, "`cache_policy` must be one of"),
        (dict(cache_policy=KeyDiff(protected=8), num_sink_tokens=1), ValueError, "`protected`"),
        (dict(cache_policy=KeyDiff(protected=-1)), ValueError, "`protected`"),
        (dict(cache_policy="keydiff", output_attentions=True), ValueError, "output_attentions"),
    ],
)
def test_bad_policy_arguments_fail_before_any_token(arguments, error, message):
    model = tiny_llama()
    ids, mask = prompt(1, 6)
    calls = []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    with cachelimit.patched("llama"), pytest.raises(error, match=message):
        model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=3,
            cache_limit=8,
            pad_token_id=0,
            return_dict_in_generate=True,
            **arguments,
        )
    handle.remove()
    assert not calls


def test_policy_without_a_limit_is_refused():
    model = tiny_llama()
    ids, mask = prompt(1, 6)
    with cachelimit.patched("llama"), pytest.raises(ValueError, match="`cache_policy` needs `cache_limit`"):
        model.generate(ids, attention_mask=mask, max_new_tokens=3, cache_policy="keydiff", pad_token_id=0)


@pytest.mark.parametrize(
    "options, new_tokens, warns",
    [
        (dict(cache_policy="keydiff"), 256 - 20 + 2, True),  # reaches position 256: past the context of 256
        (dict(cache_policy="keydiff"), 256 - 20 + 1, False),  # reaches position 255, the last one: within it
        (dict(cache_policy="tova"), 300, True),
        (dict(num_sink_tokens=4), 300, False),  # the window with sinks keeps positions within the limit
    ],
)
def test_warns_when_a_policy_can_reach_past_the_context(options, new_tokens, warns):
    """A scored policy keeps absolute positions, so a run that can go past `max_position_embeddings` (256 here) is
    warned about before any token, once; the window is not (its sinks keep the positions inside the limit)."""
    import warnings

    model = tiny_llama()
    ids, mask = prompt(1, 20)
    calls = []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    with cachelimit.patched("llama"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, cache_limit=8, pad_token_id=0, **options)
    handle.remove()
    ours = [w for w in caught if "past the model's context" in str(w.message)]
    assert len(ours) == (1 if warns else 0), [str(w.message) for w in caught]
    if warns:
        assert "max_position_embeddings=256" in str(ours[0].message)
        assert ours[0].filename == __file__  # pointed at the caller's generate
