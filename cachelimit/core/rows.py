"""What a bounded cache knows about each batch row between steps (the window policy's bookkeeping).

One `RowState` per group of layers (`core.cache`): every layer of the group sees the same tokens, so this is kept once
and advanced once per forward by the policy's plan (`core.window_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class ReusedTensors:
    """The tensors a decode step reuses instead of building (its all-true visibility, the slot it writes as a tensor),
    kept in `memo` for the rows they are for; shared by every policy's rows (`num_real`, `batch`, `fixed_shapes`)."""

    def all_true(self, keys: int) -> torch.Tensor:
        """The [B, 1, keys] all-true visibility of a decode step that reads every slot: a view of one kept tensor,
        rebuilt (at least twice as wide) only when the keys outgrow it, so growing costs O(1) per token."""
        return reused_prefix(self.memo, ("allowed", self.batch), keys, self._all_true, exact=self.fixed_shapes)

    def _all_true(self, width: int) -> torch.Tensor:
        return torch.ones(self.batch, 1, width, dtype=torch.bool, device=self.num_real.device)

    def write_index(self, sinks: int, slot: int, capacity: int) -> torch.Tensor:
        """[1] the buffer slot (`sinks + slot`) a decode step writes, as a tensor on the rows' device: a view into one
        kept `arange` of the allocated slots, so that a step makes no host-to-device copy (a pageable copy waits for
        the device) and a compiled forward gets a tensor, not an int to guard on."""
        column = sinks + slot
        return reused_prefix(self.memo, "slots", sinks + capacity, self._slot_table)[column : column + 1]

    def _slot_table(self, width: int) -> torch.Tensor:
        return torch.arange(width, device=self.num_real.device)


@dataclass
class RowState(ReusedTensors):
    """Per row: real tokens seen, where its sinks are, which ring slots hold real tokens; plus bounds over all rows
    that tell when a decode step may read every slot (its mask is then all-true: see `core.window_plan`)."""

    cursor: int  # columns written so far (pads included); equals `get_seq_length()`
    num_real: torch.Tensor  # [B] real (non-pad) tokens written so far
    sink_column: torch.Tensor  # [B, S] column of each row's j-th real token, -1 while unseen
    ring_real: torch.Tensor  # [B, capacity] whether the token in each allocated ring slot is real (not a pad)
    sinks_complete: bool = False  # every row has all S sinks: no more sink writes to plan
    last_pad_column: int = -1  # newest column that is a pad in some row (-1: none)
    last_sink_column: int = -1  # newest sink column of any row, once the sinks are complete
    #: earliest sink column of any row, once some row has one (-1 before): a query whose window starts at or before
    #: it reads no sink outside its window (`window_plan.sink_readers`); over all rows, so it stays valid (a bound)
    #: for any selection of them
    first_sink_column: int = -1
    #: [B] column of each row's first real token, -1 while unseen: chunked attention counts its chunks from there
    #: (transformers' chunked masks discount each row's left padding), so a chunked group needs it
    first_real_column: torch.Tensor | None = None
    every_row_started: bool = False  # every row has a real token: `first_real_column` is final
    #: while the sinks are incomplete: the fewest real tokens any row has written (exact: read once after a forward
    #: with pads, then advanced by one per generated token, which is real in every row), so that a decode step of
    #: generated tokens knows on the host when the last row completes its sinks
    min_real: int = 0
    #: the ring is allocated at its full size by the first forward (`BoundedCache(static=True)`), not grown
    preallocated: bool = False
    #: decode steps return every allocated ring slot (the unwritten ones masked), so that their shapes change only
    #: when the ring grows (never, when preallocated): what a compiled forward needs (`BoundedCache.is_compileable`)
    fixed_shapes: bool = False
    #: reusable all-true visibilities and their converted masks (`hf.masks`), kept with the rows they are for
    memo: dict = field(default_factory=dict)

    @classmethod
    def empty(cls, batch: int, num_sinks: int, device: torch.device) -> RowState:
        return cls(
            cursor=0,
            num_real=torch.zeros(batch, dtype=torch.long, device=device),
            sink_column=torch.full((batch, num_sinks), -1, dtype=torch.long, device=device),
            ring_real=torch.zeros(batch, 0, dtype=torch.bool, device=device),
            sinks_complete=num_sinks == 0,
            first_real_column=torch.full((batch,), -1, dtype=torch.long, device=device),
        )

    @property
    def batch(self) -> int:
        return self.num_real.shape[0]

    @property
    def capacity(self) -> int:
        """Ring slots allocated so far (every layer of the group holds at least this many)."""
        return self.ring_real.shape[1]

    def select_rows(self, index: torch.Tensor) -> None:
        """Follow a batch reordering (beam search) or expansion of the cached rows. The column bounds are over all
        rows, so they stay valid (conservative) for any selection of them; reusable masks are per batch size."""
        index = index.to(self.num_real.device)
        self.num_real = self.num_real.index_select(0, index)
        self.sink_column = self.sink_column.index_select(0, index)
        self.ring_real = self.ring_real.index_select(0, index)
        if self.first_real_column is not None:
            self.first_real_column = self.first_real_column.index_select(0, index)


def reused_prefix(memo: dict, key, width: int, build, exact: bool = False) -> torch.Tensor:
    """The first `width` entries (last dimension) of the tensor `build(n)` kept in `memo` under `key`: built at least
    twice as wide when it is outgrown (O(1) amortised per step while a ring grows), and the view of the last width
    asked for kept too, so a step at an unchanged width (a full ring) makes no op at all. `exact` builds it at exactly
    `width` (a contiguous tensor, as a compiled forward expects the same strides at every step: `fixed_shapes`)."""
    last = memo.get((key, "last"))
    if last is not None and last[0] == width:
        return last[1]
    whole = memo.get(key)
    if whole is None or whole.shape[-1] < width or (exact and whole.shape[-1] != width):
        whole = memo[key] = build(width if exact else max(width, 0 if whole is None else 2 * whole.shape[-1]))
    view = whole[..., :width]
    memo[(key, "last")] = (width, view)
    return view
