"""Scored policies on the layer mixes of real checkpoints (issue 25), against both references
(`tests.scored_reference`): a hybrid of sliding and full layers (Gemma 3: the policy decides on the full layers, the
sliding ones keep their window), multi-head latent attention (DeepSeek V3: one cached latent head serves every query
head, so the attention-scored policies average all of them; KeyDiff is refused where the cache holds the latent) and
KV sharing (Gemma 3n: the last layers read the cache of an earlier one of their type, so they see its evictions)."""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized

import cachelimit
from cachelimit.core.eviction import TOVA, KeyDiff, SnapKV
from cachelimit.core.scored_layer import ScoredLayer
from cachelimit.hf.compat import CACHE_ARGUMENT, MLA_CACHES_LATENT
from tests.common import build_tiny_model, left_padded_batch, not_served_here
from tests.layer_masks import SLIDING, config_layer_types
from tests.reference import banded_visibility
from tests.scored_recording import recording
from tests.scored_reference import attention_score, keydiff_score, replay_logits, slow_reference

LIMIT, PROTECTED, NEW = 8, 2, 14
POLICIES = {
    "keydiff": (KeyDiff(protected=PROTECTED), keydiff_score),
    "tova": (TOVA(protected=PROTECTED), attention_score(1, 1)),
    "snapkv": (SnapKV(protected=PROTECTED, window=4, kernel=3), attention_score(4, 3)),
}
#: family, layers, the attention implementation of the bounded run
FAMILIES = [("gemma3_text", 2, "sdpa"), ("deepseek_v3", 2, "sdpa"), ("gemma3n_text", 4, "sdpa")]
CASES = [(f"{family}_{name}", family, layers, attention, name) for family, layers, attention in FAMILIES
         for name in POLICIES]  # fmt: skip


def layer_roles(model, cache) -> tuple[list[int], dict]:
    """The scored layers of `cache`, and the other attention layers as the references see them (from the config,
    not from cachelimit): a sliding layer keeps the most recent min(L, W - 1) positions, a KV-sharing layer reads
    the cache of the last earlier layer of its type that stores one."""
    config = model.config
    types = config_layer_types(config)
    scored = [index for index, layer in enumerate(cache.layers) if isinstance(layer, ScoredLayer)]
    shared = getattr(config, "num_kv_shared_layers", 0) or 0
    first_shared = len(types) - shared
    others: dict = {}
    for index, kind in enumerate(types):
        if index >= first_shared:
            others[index] = max(j for j in range(first_shared) if types[j] == kind)
    return scored, others


class ScoredFamiliesTest(unittest.TestCase):
    @parameterized.expand(CASES)
    def test_matches_both_references(self, _, family, layers, attention, name):
        if (reason := not_served_here(family)) is not None:
            self.skipTest(reason)
        policy, score = POLICIES[name]
        sharp = 1.0 if score is keydiff_score else 6.0
        model = self.sharpened(build_tiny_model(family, attention, layers=layers), sharp)
        ids, mask = left_padded_batch([13, 10], seed=3)
        # sinks on a model with sliding layers move there (StreamingLLM over their window), which no mask can say
        sinks = 0 if SLIDING in config_layer_types(model.config) else 1
        if family == "deepseek_v3" and (name == "keydiff" or not MLA_CACHES_LATENT):
            refusal = "compressed latent" if MLA_CACHES_LATENT else "needs transformers >= 5.15.0"
            with cachelimit.patched(family), self.assertRaisesRegex(ValueError, refusal):
                model.generate(ids, attention_mask=mask, max_new_tokens=2, cache_limit=LIMIT, cache_policy=policy)
            return
        with cachelimit.patched(family):
            cache = cachelimit.BoundedCache.from_model(model, LIMIT, sinks, cache_policy=policy)
            with recording(model, cache) as kept:
                out = model.generate(
                    ids,
                    attention_mask=mask,
                    max_new_tokens=NEW,
                    min_new_tokens=NEW,
                    do_sample=False,
                    cache_limit=LIMIT,
                    num_sink_tokens=sinks,
                    cache_policy=policy,
                    return_dict_in_generate=True,
                    output_logits=True,
                    **{CACHE_ARGUMENT: cache},
                )
        scored, others = layer_roles(model, cache)
        self.assertTrue(scored, "no layer is scored")
        sequence, width = out.sequences, ids.shape[1]
        full_mask = torch.cat([mask, torch.ones(2, sequence.shape[1] - width, dtype=mask.dtype)], 1)
        for index, kind in enumerate(config_layer_types(model.config)):
            if kind == SLIDING and index not in others:
                window = model.config.sliding_window
                others[index] = banded_visibility(full_mask, min(LIMIT, window - 1), [(0, width)], window)
        heads = cache.layers[scored[0]].keys.shape[1]
        eager = None
        if score is not keydiff_score:
            eager = self.sharpened(build_tiny_model(family, "eager", layers=layers), sharp)
        reference, gap = slow_reference(
            model,
            sequence,
            full_mask,
            width,
            limit=LIMIT,
            sinks=sinks,
            protected=PROTECTED,
            layers=scored,
            score=score,
            eager=eager,
            heads=heads,
            others=others,
            spans=kept.spans,
        )
        self.assertGreater(gap, 1e-5 if eager is None else 1e-6, "the reference met a tie")
        for step, (got, expected) in enumerate(zip(kept, reference, strict=False)):
            self.assertEqual(got, expected, f"forward {step}: kept sets differ")
        self.assertTrue(any(len(head) == LIMIT for row in kept[-1][scored[0]] for head in row), "never cut")
        replayed = replay_logits(model, sequence, full_mask, width, kept, heads=heads, others=others)
        generated = torch.stack(out.logits, dim=1)
        torch.testing.assert_close(generated, replayed[:, width - 1 : width - 1 + NEW].float(), rtol=0, atol=1e-4)

    @staticmethod
    def sharpened(model, sharp: float):
        """Queries and keys scaled by `sharp`: attention far from uniform, score gaps far from float noise."""
        if sharp != 1.0:
            with torch.no_grad():
                for name, parameter in model.named_parameters():
                    if any(part in name for part in ("q_proj", "k_proj", "q_b_proj", "kv_b_proj", "q_a_proj")):
                        parameter.mul_(sharp)
        return model


def test_a_scored_run_reads_the_chunks_asked_for():
    """RoPE sinks make a window's chunked prefill read smaller chunks (the same result); a scored policy's result
    depends on its chunks (each is cut to the best L), so on a hybrid whose sliding layers move sinks the scored run
    still reads exactly the chunks asked for (Gemma 2: sliding and full layers, one rotary on every release)."""
    from cachelimit.hf.generate import prefill_chunk

    model = build_tiny_model("gemma2", "eager", layers=2)
    config = model.generation_config
    config.prefill_chunk_size = 512
    for policy, expected in ((None, 512), ("keydiff", 512)):
        cache = cachelimit.BoundedCache.from_model(model, 64, 4, window_prefill=True, cache_policy=policy)
        if policy is None:
            assert cache.rotates_sinks and prefill_chunk(cache, config) < 512
        else:
            assert cache.rotates_sinks and prefill_chunk(cache, config) == expected
