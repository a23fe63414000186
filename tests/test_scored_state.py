"""What a scored layer keeps across decode steps so a steady step costs little (`core.scored_layer`: KeyDiff's
inverse key norm per slot, SnapKV's column order, `core.column_order`) must stay what it stands for over long runs,
and KeyDiff's choice, made from those kept norms, must stay the definition's: at every step of runs of thousands
of decode steps, in float32 and bfloat16, with left pads and sinks, the evicted slot is the one the paper's formula
picks from the held keys in float64 (wherever the two best candidates are further apart than float noise)."""

from __future__ import annotations

import pytest
import torch
from transformers import StoppingCriteria

import cachelimit
from cachelimit.core.eviction import KeyDiff, SnapKV
from cachelimit.core.scored_layer import ScoredLayer
from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.test_scored_policy import TIE, prompt, tiny_llama

LAST = torch.iinfo(torch.long).max  # sorts an empty slot after every column

LIMIT, SINKS, PROTECTED = 16, 2, 4
PADS = (0, 5)  # left pads of the two rows
FIRST_REAL = PADS


def definition_choice(layer: ScoredLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, H] the slot KeyDiff's formula evicts from what each head holds after the forward (float64: unit keys,
    their mean direction, cosine similarities; each row's first `SINKS` real columns and the `PROTECTED` most recent
    kept, the most recent among equals), and [B, H] the gap between the two highest priorities (inf where only one
    slot could go)."""
    keys, column, end = layer.keys.double(), layer.column, layer.group.rows.cursor
    unit = torch.where(layer.real[..., None], keys / keys.norm(dim=-1, keepdim=True), 0)
    anchor = unit.sum(-2)
    similarity = torch.einsum("bhkd,bhd->bhk", unit, anchor / anchor.norm(dim=-1, keepdim=True))
    first = torch.tensor(FIRST_REAL)[:, None, None]  # each row's first real column: its sinks follow
    pinned = (column >= end - PROTECTED) | ((column >= first) & (column < first + SINKS))
    priority = similarity.masked_fill(pinned, float("-inf"))
    top2 = priority.topk(2, dim=-1).values
    best = priority == top2[..., :1]
    chosen = torch.where(best, layer.column, -1).argmax(-1)
    return chosen, torch.where(top2[..., 1] == float("-inf"), float("inf"), top2[..., 0] - top2[..., 1])


class EveryStep(StoppingCriteria):
    """After every forward, checks each scored layer of `cache` and counts the checks; never stops the run."""

    def __init__(self, cache):
        self.cache, self.tie, self.checked, self.steps = cache, TIE[torch.float32], 0, 0

    def __call__(self, input_ids, scores, **kwargs):
        self.steps += 1
        for layer in self.cache.layers:
            if isinstance(layer, ScoredLayer) and layer.is_initialized:
                self.check(layer)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def check(self, layer: ScoredLayer) -> None:
        evicting = layer.group.rows.cursor > LIMIT
        if layer.order is not None:  # SnapKV: the slots by column, the one the next step writes last
            column = torch.where(layer.column < 0, LAST, layer.column)
            if evicting:
                column = column.scatter(-1, layer.free[..., None], LAST)
            assert torch.equal(layer.order.slots, column.argsort(dim=-1, stable=True)), f"step {self.steps}"
        if "inverse" not in layer.slot_tensors:
            return
        held = layer.column >= 0
        if evicting:  # the free slot holds nothing any more (its flags are those of any free slot)
            held = held.scatter(-1, layer.free[..., None], False)
        expected = KeyDiff.inverse_norms(layer.keys, layer.real)
        torch.testing.assert_close(layer.inverse[held], expected[held], rtol=1e-6, atol=0, msg=f"step {self.steps}")
        freed = layer.column.gather(-1, layer.free[..., None])[..., 0]
        freed_real = freed >= torch.tensor(FIRST_REAL)[:, None]  # (the left pads are each row's first columns)
        if evicting and bool(layer.real.all()) and bool(freed_real.all()):  # (while a pad is held, the pad goes)
            chosen, gap = definition_choice(layer)
            clear = gap > self.tie
            assert torch.equal(layer.free[clear], chosen[clear]), f"step {self.steps}: another key evicted"
            self.checked += int(clear.sum())


# these runs go past the tiny model's context on purpose: they check the kept state, not the text (the warning
# itself is tested in test_scored_runs)
@pytest.mark.filterwarnings("ignore::cachelimit.hf.run_checks.PastContextWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("policy", [KeyDiff(protected=PROTECTED), SnapKV(protected=PROTECTED, window=4, kernel=3)])
def test_kept_state_and_choices_over_long_runs(policy, dtype):
    steps = 2000 if isinstance(policy, KeyDiff) else 400
    model = tiny_llama("sdpa", dtype)
    ids, mask = prompt(2, 12, PADS)
    with cachelimit.patched("llama"):
        cache = cachelimit.BoundedCache.from_model(model, LIMIT, SINKS, cache_policy=policy)
        check = EveryStep(cache)
        torch.manual_seed(3)
        model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=True,  # sampled, so the run does not settle into a loop of the same few tokens
            top_k=0,
            cache_limit=LIMIT,
            num_sink_tokens=SINKS,
            cache_policy=policy,
            pad_token_id=0,
            stopping_criteria=[check],
            **{CACHE_ARGUMENT: cache},
        )
    assert check.steps == steps
    if isinstance(policy, KeyDiff):  # nearly every step of every head was clear of a tie, and checked
        heads = model.config.num_hidden_layers * model.config.num_key_value_heads * ids.shape[0]
        assert check.checked > 0.9 * heads * (steps - LIMIT)
