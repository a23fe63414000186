"""The step plans of the window-with-sinks policy (`core.window.WindowPolicy`): which slot each new token lands in,
which kept keys each query reads, and where the sinks must be rotated to.

Computed once per forward for every layer of a group. Placement and growth follow `core.ring`. A query at column `q`
reads the real tokens among its window (the `L - S` columns before it, or, in a full-attention multi-token forward,
the kept past and every new token before it), plus each row's first `S` real tokens (its sinks) once they have left
that window, plus itself; a model's own sliding window and chunks apply on top (`WindowPolicy`). Two paths:
- `real_decode`: a decode step whose token is real in every row (every token `generate` appends) in a group without
  chunks: planned from the host's bookkeeping with a few device ops and no read back from the device (no host-device
  sync); once it reads every slot it is given (a full ring of real tokens, the sinks outside the window) its
  all-true visibility is a view of one kept tensor, so it builds no mask;
- `general_step`: everything else (reading which new tokens are pads; a chunked layer's visibility, which changes
  with the chunk), with an explicit [B, queries, keys] visibility (or, for the first forward of a run when nothing
  is cut, none at all: `StepPlan.model_mask`).
"""

from __future__ import annotations

from typing import Protocol

import torch

from .plan import StepPlan
from .ring import grown_capacity, slot_columns, slot_of, written_slots
from .rows import RowState


class WindowShape(Protocol):
    """What the plans read of their policy, `core.window.WindowPolicy`: a protocol, because that policy imports this
    module, which so imports nothing of it."""

    @property
    def limit(self) -> int: ...

    @property
    def num_sinks(self) -> int: ...

    @property
    def window_prefill(self) -> bool: ...

    @property
    def native_window(self) -> int | None: ...

    @property
    def chunk(self) -> int | None: ...

    @property
    def recent(self) -> int: ...

    @property
    def ring_size(self) -> int: ...


def reads_every_slot(policy: WindowShape, rows: RowState, start: int) -> bool:
    """Whether a real token decoded at column `start` reads every slot it is given: no pad among the ring slots
    written so far (the last `written_slots` columns), and no sinks, or every sink has left the window (a sink still
    inside it is read through the ring, its sink slot masked). Before the ring is full that holds for a batch without
    pads and without sinks (a cap far above the length); after, for a full ring of real tokens. Host bookkeeping
    only: nothing is read back from the device."""
    oldest = start + 1 - written_slots(start + 1, policy.ring_size)  # oldest column among the slots it reads
    if rows.last_pad_column >= oldest:
        return False
    return policy.num_sinks == 0 or (rows.sinks_complete and rows.last_sink_column < start - policy.recent)


def real_decode(policy: WindowShape, rows: RowState, rotates_sinks: bool) -> StepPlan:
    """A decode step whose new token is real in every row (a token `generate` appended: it extends the mask with
    ones), planned from the host's bookkeeping and device ops alone, so it never waits for the device: the slot, the
    capacity, the positions, the sinks the token completes, and the visibility, which is all-true once it reads every
    slot (`reads_every_slot`: a view of one kept tensor, whose converted masks `hf.masks` reuses) and otherwise the
    ring's real slots plus the sinks that have left the window."""
    start, ring, sinks = rows.cursor, policy.ring_size, policy.num_sinks
    visible = written_slots(start + 1, ring)
    capacity = grown_capacity(rows.capacity, ring if rows.preallocated else visible, ring)
    if capacity > rows.capacity:
        grown = rows.ring_real.new_zeros(rows.batch, capacity)
        grown[:, : rows.capacity] = rows.ring_real
        rows.ring_real = grown
    slot = slot_of(start, ring)
    if start < ring or start - ring <= rows.last_pad_column:  # the slot was empty or held a pad until now
        rows.ring_real[:, slot] = True
    positions = rows.num_real[:, None]
    returned = capacity if rows.fixed_shapes else visible
    plan = StepPlan(start=start, num_new=1, decode=True, capacity=capacity, positions=positions, allowed=None)
    plan.visible, plan.returned, plan.ring_slot, plan.fixed_shapes = visible, returned, slot, rows.fixed_shapes
    plan.write_index, plan.memo = rows.write_index(sinks, slot, capacity), rows.memo
    every_slot = returned == visible and reads_every_slot(policy, rows, start)
    lowest = start - policy.recent  # sinks older than this have left the window
    if not rows.sinks_complete:  # the token becomes sink j of the rows with j real tokens so far
        plan.sink_fill = positions == torch.arange(sinks, device=positions.device)
        plan.sink_source = torch.zeros_like(plan.sink_fill, dtype=torch.long)
        rows.sink_column = torch.where(plan.sink_fill, start, rows.sink_column)
        rows.min_real += 1
        if rows.min_real >= sinks:  # the row with the fewest real tokens completes its sinks now
            rows.sinks_complete, rows.last_sink_column = True, start
    if sinks and rotates_sinks:
        plan.sink_shift = (positions - policy.limit).clamp(min=0).expand(-1, sinks)
    if every_slot:
        plan.allowed, plan.reads_every_key = rows.all_true(sinks + returned), True
    else:  # unwritten slots and pads are False in `ring_real`; every written slot is inside the window
        ring_visible = rows.ring_real[:, :returned]
        if sinks:
            column = rows.sink_column
            ring_visible = torch.cat([(column >= 0) & (column < lowest), ring_visible], dim=-1)
        plan.allowed = ring_visible[:, None, :]
    rows.cursor += 1
    rows.num_real = rows.num_real + 1
    return plan


def general_step(
    policy: WindowShape, rows: RowState, new_real: torch.Tensor, all_real: bool, model_mask: bool, rotates_sinks: bool
) -> StepPlan:
    """Plan any forward over `new_real.shape[1]` new tokens (bool, False for pads; `all_real`: none is), then
    advance `rows`. It reads where the pads and sinks are back to the host (`_advance`): a few host-device syncs, in
    the forwards that carry the user's tokens (a decode step of generated tokens is `real_decode`)."""
    batch, num_new = new_real.shape
    device = new_real.device
    sinks, recent, ring = policy.num_sinks, policy.recent, policy.ring_size
    start = rows.cursor
    decode = num_new == 1
    columns = torch.arange(start, start + num_new, device=device)
    real_index = rows.num_real[:, None] + new_real.long().cumsum(1) - 1  # [B, n]
    windowed = decode or policy.window_prefill
    # Oldest column a query reads outside the sinks: its own window, or (full-attention forward) the kept past.
    lowest = columns - recent if windowed else torch.full_like(columns, start - recent)

    plan = StepPlan(
        start=start, num_new=num_new, decode=decode, capacity=0, positions=real_index.clamp(min=0), allowed=None
    )
    sink_column = rows.sink_column
    if not rows.sinks_complete:
        hits = new_real[:, :, None] & (real_index[:, :, None] == torch.arange(sinks, device=device))
        plan.sink_fill, plan.sink_source = hits.any(1), hits.to(torch.uint8).argmax(1)
        sink_column = torch.where(plan.sink_fill, start + plan.sink_source, sink_column)

    needed = ring if rows.preallocated else written_slots(start + num_new, ring)
    plan.capacity = grown_capacity(rows.capacity, needed, ring)
    ring_real = torch.zeros(batch, plan.capacity, dtype=torch.bool, device=device)
    ring_real[:, : rows.capacity] = rows.ring_real
    if decode:
        plan.ring_slot = slot_of(start, ring)
        ring_real[:, plan.ring_slot] = new_real[:, 0]
        plan.visible = written_slots(start + 1, ring)  # a decode step reads only the slots written so far ...
        plan.returned = plan.capacity if rows.fixed_shapes else plan.visible  # ... of those it returns
        plan.fixed_shapes = rows.fixed_shapes
        plan.write_index = rows.write_index(sinks, plan.ring_slot, plan.capacity)
        key_column = slot_columns(start, plan.returned, ring, device)
        key_real = ring_real[:, : plan.returned]
    else:
        past_columns = torch.arange(max(0, start - recent), start, device=device)
        plan.past_slots = slot_of(past_columns, ring)
        key_column = torch.cat([past_columns, columns])
        key_real = torch.cat([rows.ring_real[:, plan.past_slots], new_real], dim=1)
        kept = min(num_new, ring)
        plan.ring_source = torch.arange(num_new - kept, num_new, device=device)
        plan.ring_target = slot_of(start + plan.ring_source, ring)
        ring_real[:, plan.ring_target] = new_real[:, plan.ring_source]

    if model_mask:  # nothing cached, nothing cut: the new tokens attend to each other as the model's own mask says
        plan.model_mask, plan.sink_copies = True, 0
        return _advance(rows, new_real, all_real, sink_column, ring_real, plan)
    query = columns[:, None]
    allowed = key_real[:, None, :] & (key_column <= query) & (key_column >= lowest[:, None])
    if policy.native_window is not None:
        allowed &= key_column > query - policy.native_window
    query_chunk = None
    if policy.chunk is not None:  # chunked attention: a query reads only the keys of its own chunk
        first = first_real_columns(rows, new_real, start)[:, None]
        query_chunk = torch.div(columns - first, policy.chunk, rounding_mode="floor")  # [B, n]
        key_chunk = torch.div(key_column - first, policy.chunk, rounding_mode="floor")  # [B, keys]
        allowed &= key_chunk[:, None, :] == query_chunk[:, :, None]
    # A pad query reads what a real one would, without itself (as transformers' padding mask has it: after right
    # padding, the last pad's output gives the first new token); only a query with nothing to read reads itself,
    # which keeps it finite.
    allowed |= (key_column == query) & (new_real[:, :, None] | ~allowed.any(-1, keepdim=True))

    if sinks:
        # Per-query sink copies: with RoPE sinks a windowed multi-token forward (a prefill chunk) has queries at
        # different positions, and each sees sink j at its own StreamingLLM position j + max(0, p - L), so each query
        # that reads a sink gets its own copy of the S sinks, rotated for it, and reads only that copy: the last
        # `sink_copies` queries, those whose window has left a sink behind (the earlier ones read none: no copy
        # for them, so a chunk still inside the limit costs what it costs without sinks). One full-attention
        # forward reads one copy, placed for its first query (StreamingLLM reads a prompt at once from the cache
        # it finds). The copies grow with the chunk (n * S keys for n queries), which is why a chunked prefill with
        # RoPE sinks is read in smaller chunks (`WindowPolicy.sink_chunk`).
        plan.per_query_sinks = rotates_sinks and windowed and not decode
        plan.sink_copies = sink_readers(rows, sink_column, start, num_new, recent) if plan.per_query_sinks else 1
        first_copied = num_new - plan.sink_copies  # the query the first copy is for
        copy_column = sink_column.repeat(1, plan.sink_copies)[:, None, :]  # [B, 1, copies * S], query-major
        sink_allowed = (copy_column >= 0) & (copy_column < lowest[None, :, None])
        if query_chunk is not None:  # a sink is a token of the first chunk: only that chunk sees it
            first = first_real_columns(rows, new_real, start)[:, None, None]
            sink_chunk = torch.div(copy_column - first, policy.chunk, rounding_mode="floor")
            sink_allowed &= sink_chunk == query_chunk[:, :, None]
        if plan.per_query_sinks:
            owner = torch.arange(first_copied, num_new, device=device).repeat_interleave(sinks)
            sink_allowed &= owner[None, None, :] == torch.arange(num_new, device=device)[None, :, None]
        allowed = torch.cat([sink_allowed, allowed], dim=-1)
        if rotates_sinks:
            # StreamingLLM places sink j at cache position j; keys keep their absolute positions, so a sink seen from
            # a query at position p must sit at j + max(0, p - L) for the distances to match.
            first = plan.positions[:, first_copied:] if windowed else rows.num_real[:, None]
            shift = (first - policy.limit).clamp(min=0)
            plan.sink_shift = (
                shift.repeat_interleave(sinks, dim=1) if plan.per_query_sinks else shift.expand(batch, sinks)
            )
    plan.allowed = allowed
    return _advance(rows, new_real, all_real, sink_column, ring_real, plan)


def sink_readers(rows: RowState, sink_column: torch.Tensor, start: int, num_new: int, recent: int) -> int:
    """How many queries of a windowed forward over `num_new` new columns from `start` get their own sink copies: the
    last ones, from the first whose window (its `recent` columns) has left the earliest sink of any row behind; at
    least one (`key_order` points the other queries' sink columns at a copy they do not read). The earliest sink
    column of all rows is read back once (`RowState.first_sink_column`: no later row's sinks come earlier)."""
    if rows.first_sink_column < 0:
        earliest = int(torch.where(sink_column >= 0, sink_column, start + num_new).min())
        if earliest < start + num_new:  # some row has a sink: the earliest is final
            rows.first_sink_column = earliest
    if rows.first_sink_column < 0:
        return 1
    first_reader = max(0, rows.first_sink_column + recent + 1 - start)  # column - recent > the earliest sink
    return max(1, num_new - first_reader)


def first_real_columns(rows: RowState, new_real: torch.Tensor, start: int) -> torch.Tensor:
    """[B] the column of each row's first real token, counting the new tokens of a forward starting at `start` (a row
    with none yet gets the column after them: it holds only pads, whose visibility is never read)."""
    first = rows.first_real_column
    if rows.every_row_started:
        return first
    here = torch.where(new_real.any(1), new_real.to(torch.uint8).argmax(1), new_real.shape[1])
    return torch.where(first >= 0, first, start + here)


def _advance(rows: RowState, new_real, all_real: bool, sink_column, ring_real, plan: StepPlan) -> StepPlan:
    """Move `rows` past the planned forward; returns `plan`."""
    if not rows.every_row_started:
        seen = first_real_columns(rows, new_real, plan.start)
        rows.first_real_column = torch.where(seen < plan.start + plan.num_new, seen, -1)
        rows.every_row_started = bool((rows.first_real_column >= 0).all())
    rows.cursor += plan.num_new
    rows.num_real = rows.num_real + new_real.sum(1)
    rows.sink_column, rows.ring_real = sink_column, ring_real
    if not all_real:
        rows.last_pad_column = plan.start + int((~new_real).any(0).nonzero().max())
    if not rows.sinks_complete:
        rows.sinks_complete = bool((sink_column >= 0).all())
        if rows.sinks_complete:
            rows.last_sink_column = int(sink_column.max()) if sink_column.shape[1] else -1
        else:
            rows.min_real = int(rows.num_real.min())
    return plan
