"""`ScoredLayer`: a bounded layer whose heads each keep the keys their policy scores best (`core.eviction`).

Per KV head it holds up to `L + 1` slots in no order (placement and the shared mask: `core.scored`), and beside each
slot the column of the token it holds, whether that token is real and whether it is `pinned`. A decode step writes the
new key and value into each head's free slot (a tensor index per head: one scatter, no copy of the cache), returns
every slot, and, once the layer holds more than `L`, scores the keys and frees the slot of the one to evict: the
highest eviction score among those neither protected nor sinks, pads before anything real, the most recent position
first among equal scores. A multi-token forward returns the kept past (all slots but the free one) followed by the
new tokens, then keeps the `L` lowest eviction scores (among equal ones the older) in their old order, slot `L` free.

All of it is tensor work on the plan's tensors, so a compiled decode step recompiles only when the layer starts
evicting, and reads nothing back from the device. A decode step writes each head's slot as one row of the flattened
buffers (`index_copy_`: a scatter of the same rows cost ten times as much on CPU); KeyDiff keeps each key's inverse
norm in its slot (`inverse`), so a step norms its one new key, not all of them, and SnapKV keeps its slots' column
order (`core.column_order`), so a step does not sort them.
"""

from __future__ import annotations

import torch

from .column_order import ColumnOrder
from .eviction import QUERY_SCORED, KeyDiff, as_dtype, pooled
from .layers import BoundedLayer, contiguous_states
from .memory import fixed_address
from .scored import ScoredPlan
from .slot_choice import evicted_slot, first_slots, float_workspace

#: per-slot bookkeeping kept beside the keys and values, and its fill value for an empty slot: the column of the
#: token held, whether it is real, and whether it is `pinned` (never evicted: a sink or an empty slot). A steady decode
#: step writes its token where a real, unpinned one was evicted, so it writes neither `real` nor `pinned`.
SLOT_TENSORS = {"column": -1, "real": False, "pinned": True}
#: the flags of every free slot: those of a slot a real, unpinned token left, so a steady decode step, which writes
#: no flags, leaves them right (a compaction's spare slot and a pad's freed slot are flagged so; `_free`)
FREED = {"real": True, "pinned": False}
#: KeyDiff's too: each key's `KeyDiff.inverse_norms` (0: a pad or an empty slot), in KeyDiff's working dtype
INVERSE_NORMS = {"inverse": 0.0}


class ScoredLayer(BoundedLayer):
    """One decoder layer of a scored group: keys and values [B, H, slots, d] plus, per slot, `column` (-1: empty),
    `real` and `pinned`; `free` [B, H] is the slot each head's next decode step writes."""

    def __init__(self, group):
        super().__init__(group)
        self.column = self.real = self.pinned = self.free = self.inverse = None
        #: a query-scored policy's eviction, waiting for the attention call's scores (`settle_scores`)
        self.pending: tuple[ScoredPlan, dict] | None = None
        self.slot_tensors = dict(SLOT_TENSORS) | (INVERSE_NORMS if isinstance(group.policy.spec, KeyDiff) else {})
        self.order: ColumnOrder | None = None  # SnapKV's slots in column order, kept across decode steps
        self.slot_base: torch.Tensor | None = None  # [B, H] each head's first slot in the flattened buffers
        self.slot_rows: dict[str, torch.Tensor] = {}  # each buffer flattened to rows of slots (`_rebuilt`)

    @property
    def needs_query(self) -> bool:
        """The policy scores keys by the queries' attention: the attention call hands the scores over
        (`hf.attention_scores`), after the keys were written."""
        return isinstance(self.group.policy.spec, QUERY_SCORED)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, key_dim = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(batch, heads, 0, key_dim)
        self.values = value_states.new_zeros(batch, heads, 0, value_states.shape[-1])
        for name, fill in self.slot_tensors.items():
            dtype = KeyDiff.inverse_norms(key_states[..., :1, :]).dtype if name in INVERSE_NORMS else None
            setattr(self, name, torch.full((batch, heads, 0), fill, dtype=dtype, device=self.device))
        self.free = torch.zeros(batch, heads, dtype=torch.long, device=self.device)
        if getattr(self.group.policy.spec, "kernel", 1) > 1:
            self.order = ColumnOrder(self.column)
        self._rebuilt()
        self.is_initialized = True

    def reserve(self, capacity: int) -> None:
        held = self.keys.shape[-2]
        if held >= capacity:
            return
        for name in ("keys", "values"):
            old = getattr(self, name)
            grown = old.new_zeros(*old.shape[:2], capacity, old.shape[-1])
            grown[:, :, :held] = old
            setattr(self, name, grown)
        for name, fill in self.slot_tensors.items():
            old = getattr(self, name)
            grown = torch.full((*old.shape[:2], capacity), fill, dtype=old.dtype, device=old.device)
            grown[:, :, :held] = old
            setattr(self, name, grown)
        self._rebuilt()

    def _rebuilt(self, sort: bool = True) -> None:
        """After the slots were rewritten or resized (a multi-token forward, a growth; a batch reordering, which
        reorders SnapKV's column order itself: `sort=False`): that order sorted again, and where each head's slots
        start in the flattened buffers. Never inside a steady compiled step, so neither is a guard that changes."""
        if self.order is not None and sort:
            self.order.refresh(self.column)
        batch, heads, slots = self.column.shape
        self.slot_base = (torch.arange(batch * heads, device=self.device) * slots).view(batch, heads)
        self.slot_rows = {}  # each buffer as rows of its slots ([B * H * slots, d] or [B * H * slots]), made once
        for name in ("keys", "values", *self.slot_tensors):
            buffer = getattr(self, name).contiguous()  # a decode step's write must land in the buffer itself
            setattr(self, name, buffer)
            self.slot_rows[name] = buffer.view(-1, buffer.shape[-1]) if buffer.dim() == 4 else buffer.view(-1)
        fixed_address(self.keys, self.values, self.free, *(getattr(self, name) for name in self.slot_tensors))

    def _flat(self, slot: torch.Tensor) -> torch.Tensor:
        """[B * H] each head's `slot` ([B, H] or [1]) as a row of its flattened slot buffers ([B * H * slots])."""
        return (self.slot_base + slot).view(-1)

    def _slot_rows(self, name: str) -> torch.Tensor:
        """Buffer `name` as rows of its slots, to write by flat slot index: the view `_rebuilt` made, or a fresh one
        inside a compiled graph (which takes the buffers, not views of them kept aside)."""
        if not torch.compiler.is_compiling():
            return self.slot_rows[name]
        buffer = getattr(self, name)
        return buffer.view(-1, *buffer.shape[3:])

    def _write(self, plan: ScoredPlan, key_states: torch.Tensor, value_states: torch.Tensor):
        if self.pending is not None:
            raise RuntimeError(
                f"cache_policy={self.group.policy.spec.name!r} never received the attention scores of the last "
                "forward: its attention did not run through cachelimit's scoring (see cachelimit.hf.attention_scores)."
            )
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            if plan.decode or not plan.evict_after:
                self.reserve(plan.capacity)
        plan = plan.on(self.device)
        if plan.decode:
            return self._decode(plan, key_states, value_states)
        return self._forward(plan, key_states, value_states)

    def _new_slots(self, plan: ScoredPlan, key_states, value_states, steady: bool = False) -> dict[str, torch.Tensor]:
        """What the new tokens put in their slots: keys, values and, per head, their column, realness and whether
        they are pinned (and for KeyDiff their inverse norms). `steady`: a steady decode step, whose token is real
        and no sink, written where a real, unpinned token was: `real` and `pinned` hold already."""
        batch, heads, num_new = key_states.shape[:3]
        new = {"keys": key_states, "values": value_states, "column": plan.columns.expand(batch, heads, num_new)}
        if not steady:
            new["real"] = plan.new_real[:, None, :].expand(-1, heads, -1)
            new["pinned"] = plan.new_sink[:, None, :].expand(-1, heads, -1)
        if "inverse" in self.slot_tensors:
            new["inverse"] = KeyDiff.inverse_norms(key_states, None if plan.reads_every_key else new["real"])
        return new

    def _decode(self, plan: ScoredPlan, key_states, value_states):
        new = self._new_slots(plan, key_states, value_states, steady=plan.steady)
        flat = self._flat(self.free if plan.evicting else plan.write_index)  # each head's free slot, or the next
        for name, states in new.items():
            rows = self._slot_rows(name)
            rows.index_copy_(0, flat, as_dtype(states, rows.dtype).reshape(-1, *rows.shape[1:]))
        keys, values = self.keys, self.values
        if keys.shape[-2] != plan.returned:  # a growing layer returns the slots written so far
            keys, values = keys[:, :, : plan.returned], values[:, :, : plan.returned]
        if plan.evict_after:
            column = first_slots(self.column, plan.returned)
            held = {"keys": keys, "column": column, "real": self.real, "pinned": self.pinned}
            if "inverse" in self.slot_tensors:
                held["inverse"] = first_slots(self.inverse, plan.returned)
            if self.needs_query:
                self.pending = (plan, held)
            else:
                self._free(plan, self._priority(plan, held), held["column"])
        return keys, values

    def _free(self, plan: ScoredPlan, priority: torch.Tensor, column: torch.Tensor) -> None:
        """A decode step's eviction: each head's slot to evict (`evicted_slot`) is the one its next step writes,
        chosen straight into `free` (its address stays the one a compiled step was given). Where it may have been a
        pad's, its flags become `FREED`."""
        evicted_slot(priority, column, not plan.reads_every_key, out=self.free)
        if not plan.reads_every_key:
            flat = self._flat(self.free)
            for name, flag in FREED.items():
                self._slot_rows(name).index_fill_(0, flat, flag)
        if self.order is not None:
            self.order.freed(self.free)

    def settle_scores(self, scores: torch.Tensor) -> None:
        """Carry out the pending eviction with the attention scores of this forward's last queries ([B, H, K] over
        the keys the layer returned; higher is kept)."""
        plan, held = self.pending
        self.pending = None
        order = self.order.slots if self.order is not None and plan.decode else None
        if order is not None and order.shape[-1] != scores.shape[-1]:
            order = None  # (every evicting decode step scores all the slots the order covers)
        kernel = getattr(self.group.policy.spec, "kernel", 1)
        scores = pooled(scores, first_slots(held["column"], scores.shape[-1]), kernel, order)
        if plan.decode:
            priority = self._priority(plan, held, scores)
            self._free(plan, priority, held["column"])
        else:
            self._compact(plan, held, scores)

    def _priority(self, plan: ScoredPlan, held: dict, attention=None) -> torch.Tensor:
        """[B, H, K] eviction priority: the policy's score (KeyDiff's, or minus the attention a query-scored policy
        measured), -inf for what is never evicted, +inf for pads."""
        keys, column = held["keys"], held["column"]
        width = keys.shape[-2]
        every_real = plan.reads_every_key  # a steady step: every slot holds a real token
        pinned, column = first_slots(held["pinned"], width), first_slots(column, width)
        real = None if every_real else first_slots(held["real"], width)
        if attention is None:
            inverse = first_slots(held["inverse"], width) if "inverse" in held else None
            workspace = float_workspace(plan.memo, keys) if every_real else None
            scores = self.group.policy.spec.eviction_scores(keys, real, inverse, workspace)
        else:
            scores = -attention
        never = (column >= plan.protect_from) | pinned  # protected or pinned
        scores = scores.masked_fill_(never, float("-inf"))  # a fresh tensor: filled in place
        return scores if real is None else scores.masked_fill_(~real & (column >= 0), float("inf"))

    def _past(self, plan: ScoredPlan) -> dict[str, torch.Tensor]:
        """The held slots a multi-token forward reads as its past: all but each head's free slot."""
        tensors = {
            "keys": self.keys,
            "values": self.values,
            **{name: getattr(self, name) for name in self.slot_tensors},
        }
        if not plan.evicting:
            return {name: tensor[:, :, : plan.kept] for name, tensor in tensors.items()}
        order = torch.arange(plan.kept, device=self.device)
        index = order + (order >= self.free[:, :, None]).long()  # [B, H, kept]
        return {
            name: tensor.gather(
                2, index if tensor.dim() == 3 else index[..., None].expand(-1, -1, -1, tensor.shape[-1])
            )
            for name, tensor in tensors.items()
        }

    def _forward(self, plan: ScoredPlan, key_states, value_states):
        num_new = key_states.shape[2]
        past = self._past(plan)
        new = self._new_slots(plan, key_states, value_states)
        every = {name: torch.cat([past[name], new[name].to(past[name].dtype)], dim=2) for name in past}
        keys, values = (
            contiguous_states(key_states, value_states) if plan.model_mask else (every["keys"], every["values"])
        )
        if plan.evict_after:
            if self.needs_query:
                self.pending = (plan, every)
            else:
                self._compact(plan, every)
        else:
            self.reserve(plan.capacity)
            written = plan.kept + num_new
            for name, tensor in every.items():
                getattr(self, name)[:, :, :written] = tensor
            self._rebuilt()
        return keys, values

    def _compact(self, plan: ScoredPlan, every: dict, attention=None) -> None:
        """Keep the `L` candidates of lowest eviction priority (a stable sort: the earlier first among equals), in
        their old order; slot `L` is the free one, flagged as one a real, unpinned token left (`FREED`)."""
        limit = self.group.policy.limit
        by_column = every["column"].argsort(-1)  # equal priorities: the older kept (a stable sort from column order)
        priority = self._priority(plan, every, attention).gather(-1, by_column)
        keep = by_column.gather(-1, priority.sort(dim=-1, stable=True).indices[..., :limit]).sort(-1).values
        for name, tensor in every.items():
            index = keep if tensor.dim() == 3 else keep[..., None].expand(-1, -1, -1, tensor.shape[-1])
            kept = tensor.gather(2, index)
            spare = torch.full_like(kept[:, :, :1], FREED.get(name, self.slot_tensors.get(name, 0)))
            setattr(self, name, torch.cat([kept, spare], dim=2))
        self.free = torch.full_like(self.free, limit)
        self._rebuilt()

    def kept_columns(self) -> torch.Tensor:
        """[B, H, kept] the columns each head keeps for the next token (-1: a slot holding nothing or a pad), in slot
        order: what this layer's next query may read besides itself."""
        rows = self.group.rows
        column = torch.where(self.real, self.column, -1)
        if rows is None or rows.cursor <= self.group.policy.limit:
            return column[:, :, : (0 if rows is None else rows.cursor)]
        slots = torch.arange(column.shape[-1], device=column.device)
        return column.masked_fill(slots == self.free[:, :, None], -1)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            indices = indices.to(self.device)
            for name in ("keys", "values", "free", *self.slot_tensors):
                setattr(self, name, getattr(self, name).index_select(0, indices))
            if self.order is not None:
                self.order.select(indices)
            self._rebuilt(sort=False)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            for name in ("keys", "values", "free", *self.slot_tensors):
                setattr(self, name, getattr(self, name).repeat_interleave(repeats, dim=0))
            if self.order is not None:
                self.order.repeat(repeats)
            self._rebuilt(sort=False)

    def reset(self) -> None:
        super().reset()
        self.column = self.real = self.pinned = self.free = self.inverse = None
        self.pending = self.order = self.slot_base = None
        self.slot_rows = {}
