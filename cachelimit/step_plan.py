"""Per-step bookkeeping of a bounded cache, computed once per forward and shared by every layer.

All layers of a decoder see the same tokens, so which slot a token lands in, which slots a query may read,
and where the attention sinks must be rotated to are the same for every layer. Computing that once per step
(here) keeps the per-layer work to a few in-place writes, and keeps the bounding policy in one place.

Vocabulary:
- a *column* is the index of a token in the full sequence the cache has seen (pads included), i.e. the
  column of the 2D attention mask `generate` keeps;
- the cache holds `S` *sink* slots (the first `S` real tokens of each row) followed by a *ring* of
  `R = L - S + 1` slots: column `c` lives in ring slot `c % R`. Between steps the ring holds the last
  `L - S` columns plus the slot the next token overwrites, so a decode step is a single in-place write.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .policy import WindowPolicy


@dataclass
class RowState:
    """What the cache knows about each batch row, advanced once per step."""

    cursor: int  # columns written so far (pads included); equals `get_seq_length()`
    num_real: torch.Tensor  # [B] real (non-pad) tokens written so far
    sink_column: torch.Tensor  # [B, S] column of each row's j-th real token, -1 while unseen
    ring_real: torch.Tensor  # [B, R] whether the token in each ring slot is real (not a pad)
    sinks_complete: bool = False  # every row has all S sinks: no more sink writes to plan

    @classmethod
    def empty(cls, batch_size: int, policy: WindowPolicy, device: torch.device) -> RowState:
        return cls(
            cursor=0,
            num_real=torch.zeros(batch_size, dtype=torch.long, device=device),
            sink_column=torch.full((batch_size, policy.num_sinks), -1, dtype=torch.long, device=device),
            ring_real=torch.zeros(batch_size, policy.ring_size, dtype=torch.bool, device=device),
            sinks_complete=policy.num_sinks == 0,
        )

    def select_rows(self, index: torch.Tensor) -> None:
        """Follow a batch reordering (beam search) or expansion of the cached rows."""
        index = index.to(self.num_real.device)
        self.num_real = self.num_real.index_select(0, index)
        self.sink_column = self.sink_column.index_select(0, index)
        self.ring_real = self.ring_real.index_select(0, index)


@dataclass
class StepPlan:
    """Everything a layer needs to store the new tokens and return the keys this step attends to."""

    start: int  # column of the first new token
    num_new: int
    decode: bool  # one new token: written in place, the whole buffer is returned
    ring_slot: int  # decode: ring slot the new token overwrites
    past_slots: torch.Tensor | None  # multi-token: ring slots of the kept past, oldest first
    ring_source: torch.Tensor | None  # multi-token: which new tokens are kept in the ring ...
    ring_target: torch.Tensor | None  # ... and the ring slots they go to
    sink_fill: torch.Tensor | None  # [B, S] sinks that one of the new tokens becomes
    sink_source: torch.Tensor | None  # [B, S] index (among the new tokens) of that token
    sink_copies: int  # multi-token: copies of the sinks (one per query when each needs its own rotation)
    sink_cos: torch.Tensor | None  # rotation that moves each sink copy to its StreamingLLM position
    sink_sin: torch.Tensor | None
    positions: torch.Tensor  # [B, num_new] position ids of the new tokens
    allowed: torch.Tensor  # [B, num_new, num_keys] which returned keys each query reads


def plan_step(state: RowState, policy: WindowPolicy, new_real: torch.Tensor, rotary=None) -> StepPlan:
    """Plan one forward over `new_real.shape[1]` new tokens (`new_real`: bool, False for pads), then
    advance `state` past them."""
    batch, num_new = new_real.shape
    device = new_real.device
    sinks, recent, ring = policy.num_sinks, policy.recent, policy.ring_size
    start = state.cursor
    columns = torch.arange(start, start + num_new, device=device)
    real_index = state.num_real[:, None] + new_real.long().cumsum(1) - 1  # [B, C]
    positions = real_index.clamp(min=0)
    decode = num_new == 1
    windowed = decode or policy.window_prefill
    # Oldest column a query reads outside the sinks: its own window, or (full-attention prefill) the kept past.
    lowest = columns - recent if windowed else torch.full_like(columns, start - recent)

    sink_fill = sink_source = None
    sink_column = state.sink_column
    if not state.sinks_complete:
        hits = new_real[:, :, None] & (real_index[:, :, None] == torch.arange(sinks, device=device))
        sink_fill, sink_source = hits.any(1), hits.to(torch.uint8).argmax(1)
        sink_column = torch.where(sink_fill, start + sink_source, sink_column)

    ring_real = state.ring_real.clone()
    past_slots = ring_source = ring_target = None
    if decode:
        ring_slot = start % ring
        ring_real[:, ring_slot] = new_real[:, 0]
        slot_index = torch.arange(ring, device=device)
        key_column = start - (start - slot_index) % ring
        key_real = ring_real
    else:
        ring_slot = -1
        past_columns = torch.arange(max(0, start - recent), start, device=device)
        past_slots = past_columns % ring
        key_column = torch.cat([past_columns, columns])
        key_real = torch.cat([state.ring_real[:, past_slots], new_real], dim=1)
        kept = min(num_new, ring)
        ring_source = torch.arange(num_new - kept, num_new, device=device)
        ring_target = (start + ring_source) % ring
        ring_real[:, ring_target] = new_real[:, ring_source]

    query = columns[:, None]
    allowed = key_real[:, None, :] & (key_column <= query) & (key_column >= lowest[:, None])
    if policy.native_window is not None:
        allowed &= key_column > query - policy.native_window
    allowed |= key_column == query  # a query always reads itself (keeps pad queries finite)

    sink_copies, sink_cos, sink_sin = 1, None, None
    if sinks:
        per_query = rotary is not None and windowed and not decode
        sink_copies = num_new if per_query else 1
        copy_column = sink_column.repeat(1, sink_copies)[:, None, :]  # [B, 1, copies * S], query-major
        sink_allowed = (copy_column >= 0) & (copy_column < lowest[None, :, None])
        if per_query:
            owner = torch.arange(num_new, device=device).repeat_interleave(sinks)
            sink_allowed &= owner[None, None, :] == torch.arange(num_new, device=device)[None, :, None]
        allowed = torch.cat([sink_allowed, allowed], dim=-1)
        if rotary is not None:
            # StreamingLLM places sink j at cache position j; keys keep their absolute positions, so a sink
            # seen from a query at position p must sit at j + max(0, p - L) for the distances to match.
            first = positions if windowed else state.num_real[:, None]
            shift = (first - policy.limit).clamp(min=0)
            shift = shift.repeat_interleave(sinks, dim=1) if per_query else shift.expand(batch, sinks)
            sink_cos, sink_sin = rotary.cos_sin(shift)

    state.cursor += num_new
    state.num_real = state.num_real + new_real.sum(1)
    state.sink_column = sink_column
    state.ring_real = ring_real
    if not state.sinks_complete:
        state.sinks_complete = bool((sink_column >= 0).all())
    return StepPlan(
        start=start,
        num_new=num_new,
        decode=decode,
        ring_slot=ring_slot,
        past_slots=past_slots,
        ring_source=ring_source,
        ring_target=ring_target,
        sink_fill=sink_fill,
        sink_source=sink_source,
        sink_copies=sink_copies,
        sink_cos=sink_cos,
        sink_sin=sink_sin,
        positions=positions,
        allowed=allowed,
    )
