"""Per-step bookkeeping of a bounded cache, computed once per forward and shared by every layer.

All layers of a decoder see the same tokens, so which slot a token lands in, which slots a query may read,
and where the attention sinks must be rotated to are the same for every layer. Computing that once per step
(here) keeps the per-layer work to a few in-place writes, and keeps the bounding policy in one place.

Vocabulary:
- a *column* is the index of a token in the full sequence the cache has seen (pads included), i.e. the
  column of the 2D attention mask `generate` keeps;
- the cache holds `S` *sink* slots (the first `S` real tokens of each row) followed by a *ring* of at most
  `R = L - S + 1` slots: column `c` always lives in ring slot `c % R`. Once full, the ring holds the last
  `L - S` columns plus the slot the next token overwrites, so a decode step is a single in-place write.

Growth: a large `L` is a cap, not a preallocation. The ring's *capacity* (slots allocated) follows the columns
seen: it is raised to at least twice its size whenever a step needs more (never above `R`), so memory and
copies are amortised O(1) per token and no buffer is ever sized by the limit. While the capacity is below `R`
no column has wrapped (`c < capacity <= R`, so `c % R == c`): the slot map never changes when the ring grows,
growing is a plain copy of the allocated prefix, and a decode step reads only the `min(columns, R)` slots
written so far (its mask spans those slots only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .policy import WindowPolicy


def grown_capacity(capacity: int, needed: int, ring: int) -> int:
    """Ring slots to allocate so that `needed` fit: at least double the current capacity when it must grow (so the
    copies a growth makes are amortised O(1) per token), at most the ring size."""
    if needed <= capacity:
        return capacity
    return min(ring, max(needed, 2 * capacity))


@dataclass
class RowState:
    """What the cache knows about each batch row, advanced once per step."""

    cursor: int  # columns written so far (pads included); equals `get_seq_length()`
    num_real: torch.Tensor  # [B] real (non-pad) tokens written so far
    sink_column: torch.Tensor  # [B, S] column of each row's j-th real token, -1 while unseen
    ring_real: torch.Tensor  # [B, capacity] whether the token in each allocated ring slot is real (not a pad)
    sinks_complete: bool = False  # every row has all S sinks: no more sink writes to plan
    # Bounds (over all rows) that tell when the next token may read every slot: the mask is then all-true.
    last_pad_column: int = -1  # newest column that is a pad in some row (-1: none)
    last_sink_column: int = -1  # newest sink column of any row, once the sinks are complete
    full_masks: dict = field(default_factory=dict)  # all-true visibility (and its converted 4D forms), reused

    @classmethod
    def empty(cls, batch_size: int, policy: WindowPolicy, device: torch.device) -> RowState:
        return cls(
            cursor=0,
            num_real=torch.zeros(batch_size, dtype=torch.long, device=device),
            sink_column=torch.full((batch_size, policy.num_sinks), -1, dtype=torch.long, device=device),
            ring_real=torch.zeros(batch_size, 0, dtype=torch.bool, device=device),
            sinks_complete=policy.num_sinks == 0,
        )

    @property
    def capacity(self) -> int:
        """Ring slots allocated so far (every layer holds at least this many): at least min(cursor, R)."""
        return self.ring_real.shape[1]

    def select_rows(self, index: torch.Tensor) -> None:
        """Follow a batch reordering (beam search) or expansion of the cached rows. The column bounds are over all
        rows, so they stay valid (conservative) for any selection of them."""
        index = index.to(self.num_real.device)
        self.num_real = self.num_real.index_select(0, index)
        self.sink_column = self.sink_column.index_select(0, index)
        self.ring_real = self.ring_real.index_select(0, index)

    def full_allowed(self, batch: int, keys: int, device: torch.device) -> torch.Tensor:
        """The [B, 1, keys] all-true visibility of a decode step that reads every slot: a view of one cached
        tensor, rebuilt (at least twice as wide) only when the keys outgrow it, so growing costs O(1) per token."""
        allowed = self.full_masks.get(("allowed", batch))
        if allowed is None or allowed.shape[-1] < keys:
            width = max(keys, 0 if allowed is None else 2 * allowed.shape[-1])
            allowed = self.full_masks[("allowed", batch)] = torch.ones(
                batch, 1, width, dtype=torch.bool, device=device
            )
        return allowed[:, :, :keys]


@dataclass
class StepPlan:
    """Everything a layer needs to store the new tokens and return the keys this step attends to."""

    start: int  # column of the first new token
    num_new: int
    decode: bool  # one new token: written in place, the written prefix of the buffer is returned
    capacity: int  # ring slots every layer must hold after this step (grown geometrically, at most R)
    visible: int  # decode: ring slots returned (those written so far: min(columns, R))
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
    allowed: torch.Tensor | None  # [B, num_new, num_keys] which returned keys each query reads (None: `model_mask`)
    full_masks: dict | None = None  # set when `allowed` is all-true: where its converted 4D masks are kept
    #: the model builds its own mask from the 2D padding mask: the first forward of a run, when nothing is cached and
    #: nothing is cut, is plain causal attention over the new tokens (their keys are returned as they came), so a long
    #: prompt costs what it costs without a limit (no [B, T, T] visibility is ever built)
    model_mask: bool = False


def first_forward_is_causal(cursor: int, policy: WindowPolicy, num_new: int) -> bool:
    """Whether a multi-token forward reads exactly what plain causal attention over its own tokens reads: nothing is
    cached yet, and no query is cut (a full-attention prefill never is; a windowed chunk is not while every column is
    within the limit, where the window, with or without sinks, covers every earlier column)."""
    return num_new > 1 and cursor == 0 and (not policy.window_prefill or num_new <= policy.limit + 1)


def _reads_every_slot(state: RowState, policy: WindowPolicy, start: int) -> bool:
    """Whether a real token decoded at column `start` reads every slot it is given: no pad among the ring slots
    written so far (the last min(start + 1, R) columns), and no sinks, or every sink has left the window (a sink
    still inside it is read through the ring, its sink slot masked). Before the ring is full that holds for a
    batch without pads and without sinks (a cap far above the length); after, for a full ring of real tokens."""
    oldest = start + 1 - min(start + 1, policy.ring_size)  # oldest column among the slots the token reads
    if state.last_pad_column >= oldest:
        return False
    lowest = start - policy.recent  # oldest column of the window besides the sinks
    return policy.num_sinks == 0 or (state.sinks_complete and state.last_sink_column < lowest)


def _steady_decode(state: RowState, policy: WindowPolicy, start: int, rotary) -> StepPlan:
    """A decode step that reads every slot: nothing to compute but the slot, the capacity, the positions and the
    sink shift; the all-true visibility (and its converted mask, see `utils.masks`) is reused."""
    batch, sinks, ring = state.num_real.shape[0], policy.num_sinks, policy.ring_size
    visible = min(start + 1, ring)
    capacity = grown_capacity(state.capacity, visible, ring)
    if capacity > state.capacity:
        grown = state.ring_real.new_zeros(batch, capacity)
        grown[:, : state.capacity] = state.ring_real
        state.ring_real = grown
    slot = start % ring
    if start < ring or start - ring <= state.last_pad_column:  # the slot was empty or held a pad until now
        state.ring_real[:, slot] = True
    positions = state.num_real[:, None]
    sink_cos = sink_sin = None
    if sinks and rotary is not None:
        sink_cos, sink_sin = rotary.cos_sin((positions - policy.limit).clamp(min=0).expand(batch, sinks))
    state.cursor += 1
    state.num_real = state.num_real + 1
    return StepPlan(
        start=start,
        num_new=1,
        decode=True,
        capacity=capacity,
        visible=visible,
        ring_slot=slot,
        past_slots=None,
        ring_source=None,
        ring_target=None,
        sink_fill=None,
        sink_source=None,
        sink_copies=1,
        sink_cos=sink_cos,
        sink_sin=sink_sin,
        positions=positions,
        allowed=state.full_allowed(batch, sinks + visible, positions.device),
        full_masks=state.full_masks,
    )


def plan_step(
    state: RowState,
    policy: WindowPolicy,
    new_real: torch.Tensor,
    rotary=None,
    per_query_sinks: bool | None = None,
    model_mask: bool | None = None,
) -> StepPlan:
    """Plan one forward over `new_real.shape[1]` new tokens (`new_real`: bool, False for pads), then
    advance `state` past them. `per_query_sinks` (default: whether `rotary` moves sinks) gives a windowed multi-token
    forward one copy of the sinks per query; layers that share one mask must share this layout, so a hybrid model's
    layers without positions take it from their rotating neighbours (see `layered_cache`). `model_mask` (default:
    `first_forward_is_causal`; a hybrid decides for all its groups at once) leaves the mask to the model."""
    batch, num_new = new_real.shape
    device = new_real.device
    sinks, recent, ring = policy.num_sinks, policy.recent, policy.ring_size
    start = state.cursor
    decode = num_new == 1
    all_real = bool(new_real.all())
    if decode and all_real and _reads_every_slot(state, policy, start):
        return _steady_decode(state, policy, start, rotary)
    if model_mask is None:
        model_mask = first_forward_is_causal(state.cursor, policy, num_new)
    columns = torch.arange(start, start + num_new, device=device)
    real_index = state.num_real[:, None] + new_real.long().cumsum(1) - 1  # [B, C]
    positions = real_index.clamp(min=0)
    windowed = decode or policy.window_prefill
    # Oldest column a query reads outside the sinks: its own window, or (full-attention prefill) the kept past.
    lowest = columns - recent if windowed else torch.full_like(columns, start - recent)

    sink_fill = sink_source = None
    sink_column = state.sink_column
    if not state.sinks_complete:
        hits = new_real[:, :, None] & (real_index[:, :, None] == torch.arange(sinks, device=device))
        sink_fill, sink_source = hits.any(1), hits.to(torch.uint8).argmax(1)
        sink_column = torch.where(sink_fill, start + sink_source, sink_column)

    capacity = grown_capacity(state.capacity, min(start + num_new, ring), ring)
    ring_real = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
    ring_real[:, : state.capacity] = state.ring_real
    past_slots = ring_source = ring_target = None
    visible = 0
    if decode:
        ring_slot = start % ring
        ring_real[:, ring_slot] = new_real[:, 0]
        visible = min(start + 1, ring)  # slots written so far: a decode step reads only those
        slot_index = torch.arange(visible, device=device)
        key_column = start - (start - slot_index) % ring
        key_real = ring_real[:, :visible]
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

    if model_mask:  # nothing cached, nothing cut: the new tokens attend to each other as the model's own mask says
        return _advance(
            state,
            new_real,
            sink_column,
            ring_real,
            all_real,
            StepPlan(
                start=start,
                num_new=num_new,
                decode=False,
                capacity=capacity,
                visible=0,
                ring_slot=-1,
                past_slots=past_slots,
                ring_source=ring_source,
                ring_target=ring_target,
                sink_fill=sink_fill,
                sink_source=sink_source,
                sink_copies=0,
                sink_cos=None,
                sink_sin=None,
                positions=positions,
                allowed=None,
                model_mask=True,
            ),
        )
    query = columns[:, None]
    allowed = key_real[:, None, :] & (key_column <= query) & (key_column >= lowest[:, None])
    if policy.native_window is not None:
        allowed &= key_column > query - policy.native_window
    # A pad query reads what a real one would, without itself (as transformers' padding mask has it: after right
    # padding, the last pad's output gives the first new token); only a query with nothing to read reads itself,
    # which keeps it finite.
    allowed |= (key_column == query) & (new_real[:, :, None] | ~allowed.any(-1, keepdim=True))

    sink_copies, sink_cos, sink_sin = 1, None, None
    if sinks:
        rotates = rotary is not None if per_query_sinks is None else per_query_sinks
        per_query = rotates and windowed and not decode
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

    return _advance(
        state,
        new_real,
        sink_column,
        ring_real,
        all_real,
        StepPlan(
            start=start,
            num_new=num_new,
            decode=decode,
            capacity=capacity,
            visible=visible,
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
        ),
    )


def _advance(state, new_real, sink_column, ring_real, all_real: bool, plan: StepPlan) -> StepPlan:
    """Move `state` past the planned multi-token (or non-steady decode) forward; returns `plan`."""
    start, num_new = plan.start, plan.num_new
    state.cursor += num_new
    state.num_real = state.num_real + new_real.sum(1)
    state.sink_column = sink_column
    state.ring_real = ring_real
    if not all_real:
        state.last_pad_column = start + int((~new_real).any(0).nonzero().max())
    if not state.sinks_complete:
        state.sinks_complete = bool((sink_column >= 0).all())
        if state.sinks_complete:
            state.last_sink_column = int(sink_column.max()) if sink_column.shape[1] else -1
    return plan
