"""KeyDiff (`cache_policy="keydiff"`) against its two independent references (`tests.scored_reference`): the slow
implementation from the paper's formula must choose the same evictions (wherever the scores are not tied), and a
full-sequence replay of the unpatched model with per-layer, per-head masks of what the bounded run kept must give its
logits. SDPA in float64, so that float noise is far below any score gap the random weights produce; eager in float32
(transformers' eager softmax runs in float32, where float64's mask minimum becomes -inf: a padded row gives NaN)."""

from __future__ import annotations

import pytest
import torch
from parameterized import parameterized
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import cachelimit
from cachelimit.core.eviction import TOVA, KeyDiff, SnapKV
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.scored_recording import recording
from tests.scored_reference import (
    attention_score,
    keydiff_score,
    replay_logits,
    slow_reference,
)

#: a score gap below this is a tie the two may break differently (float64 noise is ~1e-15, float32's ~1e-7; the
#: attention-scored references read eager attention weights, whose softmax transformers runs in float32)
TIE = {torch.float64: 1e-9, torch.float32: 1e-4, "attention": 1e-6}
#: policy name -> (the policy as the tests ask for it, given its protected window; the reference's score)
POLICY_CASES = {
    "keydiff": (lambda protected: KeyDiff(protected=protected), keydiff_score),
    "tova": (lambda protected: TOVA(protected=protected), attention_score(1, 1)),
    "snapkv": (lambda protected: SnapKV(protected=protected, window=4, kernel=3), attention_score(4, 3)),
}
LOGITS = {torch.float64: 1e-6, torch.float32: 1e-4}  # generate's logits are float32


def tiny_llama(attention: str = "sdpa", dtype=torch.float64, sharp: float = 1.0):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attn_implementation=attention,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # `sharp` scales queries and keys: attention far from uniform, score gaps far from noise
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(sharp)
            layer.self_attn.k_proj.weight.mul_(sharp)
    return model.to(dtype).eval()


def prompt(batch: int, length: int, pads: tuple[int, ...] = ()):
    torch.manual_seed(1)
    ids = torch.randint(1, 61, (batch, length))
    mask = torch.ones_like(ids)
    for row, count in enumerate(pads):
        mask[row, :count] = 0
        ids[row, :count] = 0
    return ids, mask


def assert_same_evictions(mine, theirs, gap, tie):
    assert gap > tie, f"the reference met a tie ({gap:.2e}): pick another seed"
    assert len(mine) >= 3
    for step, (got, expected) in enumerate(zip(mine, theirs, strict=False)):
        assert got == expected, f"forward {step}: kept sets differ"


CASES = [
    ("greedy", dict(limit=8, sinks=0), {}, (1, 14, ()), None),
    ("sinks_left_pads", dict(limit=10, sinks=2), {}, (3, 13, (0, 4, 9)), None),
    ("protected", dict(limit=9, sinks=1, protected=3), {}, (2, 11, (0, 2)), None),
    ("sampling", dict(limit=8, sinks=1), dict(do_sample=True, top_k=0), (2, 12, (0, 3)), None),
    ("chunked_prefill", dict(limit=7, sinks=2), {}, (2, 23, (0, 5)), 6),
    ("short_prompt", dict(limit=12, sinks=0), {}, (2, 5, (0, 1)), None),
]


#: the release dispatches eager attention through ALL_ATTENTION_FUNCTIONS, where a query-scored policy scores it
EAGER_DISPATCHED = hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface")


class PolicyReferences:
    attention, dtype, policy = "sdpa", torch.float64, "keydiff"

    @parameterized.expand(CASES)
    def test_matches_both_references(self, _, bound, options, shape, chunk):
        make, score = POLICY_CASES[self.policy]
        if self.attention == "eager" and score is not keydiff_score and not EAGER_DISPATCHED:
            pytest.skip("transformers < 5 calls eager attention directly: refused (test_eager_refused_there)")
        sharp = 1.0 if score is keydiff_score else 6.0
        model = tiny_llama(self.attention, self.dtype, sharp)
        limit, sinks, protected = bound["limit"], bound["sinks"], bound.get("protected", 0)
        policy = make(protected)
        ids, mask = prompt(*shape)
        with cachelimit.patched("llama"):
            cache = cachelimit.BoundedCache.from_model(
                model, limit, sinks, cache_policy=policy, window_prefill=chunk is not None
            )
            torch.manual_seed(2)
            with recording(model, cache) as kept:
                out = model.generate(
                    ids,
                    attention_mask=mask,
                    max_new_tokens=16,
                    min_new_tokens=16,
                    cache_limit=limit,
                    num_sink_tokens=sinks,
                    cache_policy=policy,
                    prefill_chunk_size=chunk,
                    return_dict_in_generate=True,
                    output_logits=True,
                    pad_token_id=0,
                    **{CACHE_ARGUMENT: cache},
                    **({"do_sample": False} | options),
                )
        sequence = out.sequences
        full_mask = torch.cat(
            [mask, torch.ones(mask.shape[0], sequence.shape[1] - mask.shape[1], dtype=mask.dtype)], 1
        )
        eager = None if score is keydiff_score else tiny_llama("eager", self.dtype, sharp)
        reference, gap = slow_reference(
            model,
            sequence,
            full_mask,
            ids.shape[1],
            limit=limit,
            sinks=sinks,
            protected=protected,
            chunk=chunk,
            score=score,
            eager=eager,
            spans=kept.spans,
        )
        tie = TIE[self.dtype] if eager is None else TIE["attention"]
        assert_same_evictions(kept, reference, gap, tie)
        assert any(len(head) == limit for row in kept[-1][0] for head in row), "the bound never cut"
        replayed = replay_logits(model, sequence, full_mask, ids.shape[1], kept, chunk=chunk)
        generated = torch.stack(out.logits, dim=1)
        width = ids.shape[1]
        expected = replayed[:, width - 1 : width - 1 + generated.shape[1]]
        torch.testing.assert_close(generated.to(expected.dtype), expected, rtol=0, atol=LOGITS[self.dtype])


class TestKeyDiffSdpa(PolicyReferences):
    attention, dtype, policy = "sdpa", torch.float64, "keydiff"


class TestKeyDiffEager(PolicyReferences):
    attention, dtype, policy = "eager", torch.float32, "keydiff"


class TestTovaSdpa(PolicyReferences):
    attention, dtype, policy = "sdpa", torch.float64, "tova"


class TestTovaEager(PolicyReferences):
    attention, dtype, policy = "eager", torch.float32, "tova"


class TestSnapKVSdpa(PolicyReferences):
    attention, dtype, policy = "sdpa", torch.float64, "snapkv"
