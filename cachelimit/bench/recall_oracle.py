"""The oracle keep-set of the recall benchmark: what a policy that knew where the fact is would keep at budget `L`.

It keeps, after every forward, the first `S` positions (the sinks), the fact's positions (`pinned`) and the most
recent positions that fit in `L`, and evicts the rest, oldest first. It is a benchmark reference, not a cachelimit
policy: a policy cannot know which tokens a later question will ask about (and `cachelimit.core`, where policies
live, belongs to another developer). So it runs its own exact greedy loop on the model's public forward: a
transformers `DynamicCache` whose layers are cut, after each forward, to the kept columns (every layer and head
alike), with explicit position ids, so kept keys keep their original positions as cachelimit's scored policies do
and new tokens get their absolute positions. Like the scored policies, a forward of many tokens (the prompt read
whole, or one chunk of it) reads the kept past and all its tokens, then is cut to `L`; a decode step reads the `L`
kept and itself. `tests/test_bench_recall.py` checks it against an unbounded run when nothing is evicted and
against an explicit-mask reference when it cuts.

A model with sliding layers (Gemma 3: sliding 512 and full) gets explicit masks, one per layer type (the dict its
modeling code accepts): transformers builds a sliding mask from slot distances, which are not position distances
once columns are cut. Every layer holds the same kept columns (a plain `DynamicCache`: no layer trims itself), and
a sliding layer's query reads a kept key only within its own window (`q - k < sliding_window` in positions, as
transformers' sliding pattern says): the model's pattern, on top of the keep-set.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from ..hf.compat import output_cache, with_cache


class OracleCache:
    """The kept columns (every layer alike) of one oracle run and its DynamicCache."""

    def __init__(self, model, limit: int, sinks: int, pinned: set[int]):
        if sinks + len(pinned) >= limit:
            raise ValueError(
                f"the oracle keep-set needs room beyond its {sinks} sinks and {len(pinned)} fact tokens: "
                f"budget {limit} is too small"
            )
        self.model, self.limit, self.sinks, self.pinned = model, limit, sinks, set(pinned)
        self.windows = _windows(model.config)  # None: no sliding layers, the model builds its own masks
        self.cache = DynamicCache() if self.windows else DynamicCache(config=model.config)
        self.columns: list[int] = []  # the column held in each cache slot, in order
        self.next_column = 0

    def keep(self) -> list[int]:
        """The slots to keep: sinks and fact first, then the most recent columns that fit."""
        pinned = [slot for slot, column in enumerate(self.columns) if column < self.sinks or column in self.pinned]
        room = self.limit - len(pinned)
        chosen = set(pinned)
        recent = [slot for slot in range(len(self.columns) - 1, -1, -1) if slot not in chosen][:room]
        return sorted(chosen | set(recent))

    def cut(self) -> None:
        if len(self.columns) <= self.limit:
            return
        slots = self.keep()
        index = torch.tensor(slots, device=self.model.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
        self.columns = [self.columns[slot] for slot in slots]

    def masks(self, count: int) -> dict[str, torch.Tensor]:
        """{layer type: [1, 1, count, held + count] additive mask} of the next `count` columns: the kept past and
        the new columns causally, within each type's window."""
        device, dtype = self.model.device, self.model.dtype
        queries = torch.arange(self.next_column, self.next_column + count, device=device)[:, None]
        keys = torch.tensor(self.columns + list(range(self.next_column, self.next_column + count)), device=device)
        zero = torch.zeros((), dtype=dtype, device=device)
        blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=device)
        masks = {}
        for kind, window in self.windows.items():
            visible = keys[None] <= queries
            if window is not None:
                visible &= queries - keys[None] < window
            masks[kind] = torch.where(visible, zero, blocked)[None, None]
        return masks

    def forward(self, ids: list[int]) -> torch.Tensor:
        """Read `ids` (the next columns) over the kept past, then cut to the budget; the last position's logits."""
        count = len(ids)
        positions = torch.arange(self.next_column, self.next_column + count, device=self.model.device)[None]
        tokens = torch.tensor([ids], device=self.model.device)
        held = len(self.columns)
        arguments = {
            "input_ids": tokens,
            "position_ids": positions,
            "attention_mask": self.masks(count)
            if self.windows
            else torch.ones(1, held + count, dtype=torch.long, device=self.model.device),
            "cache_position": torch.arange(held, held + count, device=self.model.device),
            "use_cache": True,
        }
        out = self.model(**with_cache(arguments, self.cache))
        self.cache = output_cache(out)
        self.columns += list(range(self.next_column, self.next_column + count))
        self.next_column += count
        self.cut()
        return out.logits[0, -1]


def _windows(config) -> dict[str, int | None] | None:
    """{layer type: its window (None: full attention)} of a model with sliding layers; None for any other model."""
    types = set(getattr(config.get_text_config(decoder=True), "layer_types", None) or ())
    if "sliding_attention" not in types:
        return None
    unknown = types - {"sliding_attention", "full_attention"}
    if unknown:
        raise ValueError(f"the oracle keep-set serves sliding and full attention layers, not {sorted(unknown)}")
    window = config.get_text_config(decoder=True).sliding_window
    return {kind: window if kind == "sliding_attention" else None for kind in types}


def eos_ids(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set() if eos is None else {eos} if isinstance(eos, int) else set(eos)


@torch.inference_mode()
def oracle_generate(oracle: OracleCache, ids: list[int], max_new_tokens: int, chunk: int | None = None) -> list[int]:
    """Greedy continuation of `ids` (read whole, or `chunk` tokens per forward) under the oracle keep-set, stopping
    at the model's EOS; the new token ids. `suppress_tokens` of the generation config is honoured (the tiny model's
    non-printable tokens), so a run compares with `generate`'s greedy run."""
    suppressed = list(oracle.model.generation_config.suppress_tokens or [])
    stops = eos_ids(oracle.model)
    step = len(ids) if chunk is None else chunk
    for start in range(0, len(ids), step):
        logits = oracle.forward(ids[start : start + step])
    new: list[int] = []
    while len(new) < max_new_tokens:
        if suppressed:
            logits = logits.clone()
            logits[suppressed] = float("-inf")
        token = int(logits.argmax())
        new.append(token)
        if token in stops or len(new) == max_new_tokens:
            break
        logits = oracle.forward([token])
    return new
