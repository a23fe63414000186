"""The plans of a scored policy (`core.eviction`): per row, which held slots are real, for the mask and the layers.

A scored layer (`core.scored_layer`) holds up to `L + 1` slots per KV head, in no order: until a row has seen `L + 1`
columns they fill in column order (nothing is evicted: a bounded run reads what an unbounded one reads); from then on
every decode step writes its token into the slot the previous step freed, attention reads all `L + 1` slots, and the
layer frees the slot of the key its policy evicts. After a multi-token forward that brings more than `L` positions,
the layer keeps the `L` best of the kept past and the new tokens, in their old order, and slot `L` is the free one.

Each head chooses its own evictions, so which slot holds which column differs from head to head and layer to layer.
The mask does not: pads go first (a pad is evicted before any real token, the earliest first), so a row that still
holds pads has evicted no real token and its heads all hold the same columns in the same slots, and a row that has
evicted a real token holds no pad: every slot it reads is real. That is why one mask per row serves every layer and
head (`ScoredRows.slot_real`), and why steady decoding needs no mask at all (`StepPlan.reads_every_key`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from .plan import StepPlan
from .ring import grown_capacity
from .rows import ReusedTensors


@dataclass
class ScoredRows(ReusedTensors):
    """Per row, between forwards: real tokens seen, which held slots are real, and which slot is free when every
    head frees the same one (`free_row`, -1 when each head has its own: the row has evicted a real token)."""

    cursor: int
    num_real: torch.Tensor  # [B]
    slot_real: torch.Tensor  # [B, capacity]
    free_row: torch.Tensor  # [B] the free slot shared by every head, or -1
    pads_held: int = 0  # the most pad slots any row holds (0: every held slot of every row is real)
    preallocated: bool = False
    fixed_shapes: bool = False
    memo: dict = field(default_factory=dict)

    @classmethod
    def empty(cls, batch: int, device: torch.device) -> ScoredRows:
        return cls(
            cursor=0,
            num_real=torch.zeros(batch, dtype=torch.long, device=device),
            slot_real=torch.zeros(batch, 0, dtype=torch.bool, device=device),
            free_row=torch.full((batch,), -1, dtype=torch.long, device=device),
        )

    @property
    def batch(self) -> int:
        return self.num_real.shape[0]

    @property
    def capacity(self) -> int:
        return self.slot_real.shape[1]

    def select_rows(self, index: torch.Tensor) -> None:
        index = index.to(self.num_real.device)
        self.num_real = self.num_real.index_select(0, index)
        self.slot_real = self.slot_real.index_select(0, index)
        self.free_row = self.free_row.index_select(0, index)

    def column_tensor(self, column: int) -> torch.Tensor:
        """[1] `column` as a fresh tensor, from one kept device counter that each call moves on (no host-to-device
        copy, no table that grows with the run)."""
        counter = self.memo.get("column")
        if counter is None:
            counter = self.memo["column"] = torch.full((1,), column, dtype=torch.long, device=self.num_real.device)
        elif self.memo.get("column_at") != column:
            counter.fill_(column)
        self.memo["column_at"] = column + 1
        current = counter.clone()
        counter.add_(1)
        return current


@dataclass(eq=False)
class ScoredPlan(StepPlan):
    """A `StepPlan` for the layers of a scored group (besides the mask fields every plan has)."""

    evicting: bool = False  # the layer holds a free slot: a decode writes there, a forward reads around it
    evict_after: bool = False  # the layer evicts once the new keys are written (it then holds more than `L`)
    kept: int = 0  # multi-token: held slots read as the past
    new_real: torch.Tensor | None = None  # [B, n]
    new_sink: torch.Tensor | None = None  # [B, n] whether each new token is a sink (None: a steady step)
    steady: bool = False  # a decode step into a freed slot with no pad held: its token is real and no sink
    columns: torch.Tensor | None = None  # [n] the new tokens' columns
    protect_from: torch.Tensor | None = None  # [1] keys from this column on are protected after this forward

    def last_visibility(self, window: int) -> torch.Tensor | None:
        """[B, w, keys] which returned key each of the forward's last `w` queries reads (None: every key), for a
        query-scored policy's scores: the plan's visibility, or, where the model masks the forward itself (nothing
        cached), causal attention over its real tokens, each query reading itself."""
        if self.reads_every_key:
            return None
        if self.allowed is not None:
            return self.allowed[:, -window:]
        num_new = self.num_new
        queries = torch.arange(num_new - min(window, num_new), num_new, device=self.device)[:, None]
        column = torch.arange(num_new, device=self.device)
        seen = self.new_real[:, None, :] & (column <= queries)
        return seen | (column == queries)


def first_free(slot_real: torch.Tensor) -> torch.Tensor:
    """[B] the first slot holding no real token, -1 in a row where every slot is real."""
    missing = ~slot_real
    return torch.where(missing.any(-1), missing.to(torch.uint8).argmax(-1), -1)


def plan_decode(policy, rows: ScoredRows, real: torch.Tensor | None) -> ScoredPlan:
    """One token per row (`real` None: real in every row, as every token `generate` appends: nothing is read back
    from the device, so a steady step makes no host sync)."""
    start, limit = rows.cursor, policy.limit
    growing = start <= limit
    if growing:  # slot = column until the row has seen L + 1 columns
        visible = start + 1
        capacity = grown_capacity(rows.capacity, limit + 1 if rows.preallocated else visible, limit + 1)
        if capacity > rows.capacity:
            grown = rows.slot_real.new_zeros(rows.batch, capacity)
            grown[:, : rows.capacity] = rows.slot_real
            rows.slot_real = grown
        rows.slot_real[:, start] = True if real is None else real[:, 0]
    else:
        visible = capacity = limit + 1
        if rows.pads_held:  # a row whose heads share their free slot: its token lands there in every head
            value = torch.ones(rows.batch, 1, dtype=torch.bool, device=rows.slot_real.device)
            value = (value if real is None else real) | (rows.free_row < 0)[:, None]
            rows.slot_real.scatter_(1, rows.free_row.clamp(min=0)[:, None], value)
    returned = capacity if rows.fixed_shapes else visible
    positions = rows.num_real[:, None]
    plan = ScoredPlan(start=start, num_new=1, decode=True, capacity=capacity, positions=positions, allowed=None)
    plan.visible, plan.returned, plan.fixed_shapes, plan.memo = visible, returned, rows.fixed_shapes, rows.memo
    plan.evicting, plan.evict_after = not growing, start >= limit
    plan.write_index = rows.write_index(0, start, limit + 1) if growing else None
    plan.columns = rows.column_tensor(start)
    plan.protect_from = plan.columns + (1 - policy.protected)
    plan.new_real = real if real is not None else torch.ones_like(positions, dtype=torch.bool)
    if real is None and rows.pads_held == 0 and returned == visible:  # every slot read holds a real token
        plan.allowed, plan.reads_every_key = rows.all_true(returned), True
    else:
        plan.allowed = rows.slot_real[:, None, :returned]
    plan.steady = not growing and plan.reads_every_key
    if not plan.steady:  # (a steady step's token is no sink: more than L real ones came before it)
        plan.new_sink = plan.new_real & (positions < policy.num_sinks)
    rows.cursor += 1
    rows.num_real = rows.num_real + (1 if real is None else real[:, 0].long())
    if real is not None:  # read from the mask already: count exactly (the written slots only)
        rows.pads_held = int((~rows.slot_real[:, : min(rows.cursor, limit + 1)]).sum(-1).max())
    elif not growing and rows.pads_held:
        rows.pads_held -= 1  # every row holding a pad slot filled one
    if plan.evict_after:  # a row still holding a pad evicts its first one (every head alike), others their own
        rows.free_row = first_free(rows.slot_real)
    return plan


def plan_forward(policy, rows: ScoredRows, new_real: torch.Tensor, model_mask: bool) -> ScoredPlan:
    """A multi-token forward (or a decode step with pads read from the mask): reads the kept past and the new
    tokens causally, then keeps the best `L` (host reads of the pads: this path carries the user's tokens)."""
    batch, num_new = new_real.shape
    device, start, limit = new_real.device, rows.cursor, policy.limit
    kept = min(start, limit)
    evicting = start > limit
    if evicting:  # the held slots but the free one (a row's pads share it; a row without pads is all real)
        order = torch.arange(kept, device=device)
        free = rows.free_row.clamp(min=0)[:, None]
        past_real = rows.slot_real.gather(1, order + (order >= free).long())
    else:
        past_real = rows.slot_real[:, :kept]
    real_index = rows.num_real[:, None] + new_real.long().cumsum(1) - 1
    plan = ScoredPlan(start, num_new, False, 0, real_index.clamp(min=0), None, model_mask=model_mask)
    plan.evicting, plan.kept, plan.new_real, plan.memo = evicting, kept, new_real, rows.memo
    plan.columns = torch.arange(start, start + num_new, device=device)
    plan.new_sink = new_real & (real_index < policy.num_sinks)
    plan.protect_from = plan.columns[-1:] + (1 - policy.protected)
    plan.fixed_shapes = rows.fixed_shapes
    candidates = torch.cat([past_real, new_real], dim=1)
    if not model_mask:
        keys = kept + num_new
        column = torch.arange(keys, device=device)
        query = torch.arange(kept, keys, device=device)[:, None]
        allowed = candidates[:, None, :] & (column <= query)
        allowed |= (column == query) & (new_real[:, :, None] | ~allowed.any(-1, keepdim=True))
        plan.allowed = allowed
    total = kept + num_new
    plan.evict_after = total > limit
    if plan.evict_after:
        plan.capacity = limit + 1
        # a row with L real candidates keeps only real ones; one with fewer keeps them all and its earliest pads
        real_count = candidates.sum(-1, keepdim=True)
        pads_kept = (~candidates).cumsum(-1) <= (limit - real_count)
        first = torch.arange(total, device=device) < limit
        keep = torch.where(real_count >= limit, first, candidates | pads_kept)
        kept_real = candidates[keep].view(batch, limit) | (real_count >= limit)
        rows.slot_real = torch.cat([kept_real, kept_real.new_zeros(batch, 1)], dim=1)
        rows.free_row = torch.full_like(rows.free_row, limit)
        rows.pads_held = int((~kept_real).sum(-1).max())
    else:
        needed = limit + 1 if rows.preallocated else total
        plan.capacity = grown_capacity(rows.capacity, needed, limit + 1)
        slot_real = candidates.new_zeros(batch, plan.capacity)
        slot_real[:, :total] = candidates
        rows.slot_real = slot_real
        rows.pads_held = int((~candidates).sum(-1).max())
    rows.cursor += num_new
    rows.num_real = rows.num_real + new_real.sum(1)
    return plan


@dataclass(frozen=True)
class ScoredPolicy:
    """The group-level side of a scored eviction policy (the `core.policy.Policy` protocol): `spec` (a
    `core.eviction` policy) scores the keys; `protected` most recent positions and each row's first `num_sinks` real
    tokens are never evicted. A multi-token forward reads the kept past and its own tokens causally whether or not
    the prefill is chunked (`window_prefill` changes nothing here: each chunk is read, then the best `L` are kept)."""

    limit: int
    num_sinks: int
    protected: int
    spec: object
    window_prefill: bool = False

    @property
    def slots(self) -> int:
        return self.limit + 1

    def with_window_prefill(self, window_prefill: bool) -> ScoredPolicy:
        return dataclasses.replace(self, window_prefill=window_prefill)

    def new_rows(self, batch: int, device: torch.device) -> ScoredRows:
        return ScoredRows.empty(batch, device)

    def first_forward_is_causal(self, cursor: int, num_new: int) -> bool:
        return num_new > 1 and cursor == 0

    def plan(self, rows: ScoredRows, new_real, *, model_mask: bool, rotates_sinks: bool) -> ScoredPlan:
        if new_real is None or (new_real.shape[1] == 1 and bool(new_real.all())):
            return plan_decode(self, rows, None)
        if new_real.shape[1] == 1:
            return plan_decode(self, rows, new_real)
        return plan_forward(self, rows, new_real, model_mask)

    def key_order(self, plan: StepPlan) -> torch.Tensor:
        raise ValueError("output_attentions with a scored cache_policy: its slots are in no sequence order.")

    def kept_lengths(self, rows: ScoredRows) -> torch.Tensor:
        return rows.num_real.clamp(max=self.limit)
