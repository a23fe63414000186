"""The first policy (`core.policy`): a sliding window with attention sinks (StreamingLLM).

Each row keeps its first `S = num_sinks` real tokens plus its most recent `L - S` tokens, `L = limit`. Every new token
reads them plus itself (transformers' `sliding_window = L + 1`). A model's own attention pattern applies on top of the
bound: a native sliding window (the sinks stay visible past it: each layer type runs StreamingLLM over its own window)
and chunked attention (a query reads only its own chunk, sinks included: the bound never shows a chunked layer a key
its chunk hides). Placement in the ring follows `core.ring`; the plans are computed in `core.window_plan`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .plan import StepPlan
from .ring import slot_columns, slot_of
from .rows import RowState
from .window_plan import general_step, real_decode

#: the smallest chunk `WindowPolicy.sink_chunk` reads a chunked prefill with RoPE sinks in: below it, the cost of a
#: forward (planning, its mask, every layer's call) outweighs the sink copies it saves (measured on SmolLM2-135M:
#: `benchmarks/sink_prefill.py`)
MIN_SINK_CHUNK = 64


@dataclass(frozen=True)
class WindowPolicy:
    """Keep the first `num_sinks` real tokens of each row plus its most recent `limit - num_sinks` tokens.

    `window_prefill` makes a multi-token forward (a chunked prefill) obey the window for every query; otherwise it
    reads the whole kept past and all new tokens causally, and the cache is cut afterwards. `native_window` is a
    model's own `sliding_window` (keys a query may see, itself included), applied on top. `chunk` is a model's own
    chunked attention (`attention_chunk_size` C, Llama 4): a query reads only the keys of its own chunk of C positions,
    chunks counted from each row's first real token as transformers' chunked masks count them, applied on top too.
    """

    limit: int
    num_sinks: int = 0
    window_prefill: bool = False
    native_window: int | None = None
    chunk: int | None = None

    @property
    def recent(self) -> int:
        """Most recent positions kept besides the sinks."""
        return self.limit - self.num_sinks

    @property
    def ring_size(self) -> int:
        """`R`: ring slots once the window is full (the recent positions plus the slot the next token goes to)."""
        return self.recent + 1

    @property
    def slots(self) -> int:
        """The most slots a layer ever holds (sinks + full ring); a cap, never allocated up front."""
        return self.num_sinks + self.ring_size

    def sink_chunk(self, chunk: int) -> int:
        """The chunk size a chunked prefill of `chunk` tokens is read in when this policy's sinks are RoPE sinks:
        `chunk`, or less where its per-query sink copies (`window_plan.general_step`: S keys per query for each of
        the n queries of a chunk, n * S keys more for each to read) would cost more than its window: at most
        max(`MIN_SINK_CHUNK`, (L - S) / (2 S)) tokens, whose copies add at most half a window to the keys each
        query reads. A windowed prefill's result does not depend on its chunk size (every query reads its own
        window and sinks, whatever chunk it is in), and a smaller chunk honours the size asked for, a bound on a
        forward's memory. Measured on SmolLM2-135M (L = 1024, S = 4, chunks of 1024: b = 127), sub-chunks of 255
        cost more (1.31x the prefill without sinks at 4k tokens, against 1.19x), and so did 64 at 2k (more forwards
        for the same work); see docs/policies.md, "Attention sinks"."""
        if not self.num_sinks or not self.window_prefill:
            return chunk
        return min(chunk, max(MIN_SINK_CHUNK, self.recent // (2 * self.num_sinks)))

    def with_window_prefill(self, window_prefill: bool) -> WindowPolicy:
        return dataclasses.replace(self, window_prefill=window_prefill)

    def new_rows(self, batch: int, device: torch.device) -> RowState:
        return RowState.empty(batch, self.num_sinks, device)

    def first_forward_is_causal(self, cursor: int, num_new: int) -> bool:
        """Whether a multi-token forward reads exactly what plain causal attention over its own tokens reads: nothing
        is cached yet, and no query is cut (a full-attention prefill never is; a windowed chunk is not while every
        column is within the limit, where the window, with or without sinks, covers every earlier column)."""
        return num_new > 1 and cursor == 0 and (not self.window_prefill or num_new <= self.limit + 1)

    def plan(
        self, rows: RowState, new_real: torch.Tensor | None, *, model_mask: bool, rotates_sinks: bool
    ) -> StepPlan:
        """One forward's plan over `new_real.shape[1]` new tokens (bool, False for pads; None: one token per row that
        is real in every row, as every token `generate` appends, so nothing is read from the device); advances
        `rows`. `rotates_sinks`: the group has layers whose sink keys are moved (RoPE), so sinks get positions (and,
        in a windowed multi-token forward, one copy per query). `model_mask`: the model masks this forward itself."""
        chunked = self.chunk is not None  # a chunked layer's visibility changes with the chunk: planned in full
        if new_real is None:
            if not chunked:
                return real_decode(self, rows, rotates_sinks)
            real = torch.ones(rows.batch, 1, dtype=torch.bool, device=rows.ring_real.device)
            return general_step(self, rows, real, True, model_mask, rotates_sinks)
        all_real = bool(new_real.all())
        if not chunked and new_real.shape[1] == 1 and all_real:
            return real_decode(self, rows, rotates_sinks)
        return general_step(self, rows, new_real, all_real, model_mask, rotates_sinks)

    def key_order(self, plan: StepPlan) -> torch.Tensor:
        """[queries, shown keys]: for each query of the step, which of the keys the layers returned is shown at each
        position of the sequence-ordered attention map: `[the S sinks | the window, oldest first]` once the bound
        has cut, every column seen so far (sink slots, masked duplicates then, are left out) before."""
        sinks, ring, queries = self.num_sinks, self.ring_size, plan.num_new
        device = plan.positions.device
        if plan.decode:
            window = torch.arange(plan.visible, device=device)
            if plan.visible == ring:  # full ring: the oldest column sits in the slot after the newest
                window = slot_of(window + plan.start + 1, ring)
            window = sinks + window
            oldest = plan.start + 1 - plan.visible
        else:  # [sink copies | kept past, oldest first | new tokens]: the window part is in order already
            past = plan.past_slots.numel()
            window = sinks * plan.sink_copies + torch.arange(past + queries, device=device)
            oldest = plan.start - past
        order = window.expand(queries, -1)
        if sinks and oldest > 0:
            copy = torch.zeros(queries, dtype=torch.long, device=device)
            if plan.per_query_sinks:  # the last `sink_copies` queries read their own; the others read no sink
                copy = (torch.arange(queries, device=device) - (queries - plan.sink_copies)).clamp(min=0)
            order = torch.cat([copy[:, None] * sinks + torch.arange(sinks, device=device), order], dim=1)
        return order

    def kept_lengths(self, rows: RowState) -> torch.Tensor:
        """[B] real positions each row keeps for the next token (sinks + recent window), at most `limit`."""
        columns = slot_columns(rows.cursor - 1, rows.capacity, self.ring_size, rows.ring_real.device)
        window_start = rows.cursor - self.recent
        in_window = rows.ring_real & (columns >= window_start) & (columns >= 0)
        sinks = ((rows.sink_column >= 0) & (rows.sink_column < window_start)).sum(1)
        return in_window.sum(1) + sinks
