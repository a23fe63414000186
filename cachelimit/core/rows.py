"""What a bounded cache knows about each batch row between steps (the window policy's bookkeeping).

One `RowState` per group of layers (`core.cache`): every layer of the group sees the same tokens, so this is kept once
and advanced once per forward by the policy's plan (`core.window_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class RowState:
    """Per row: real tokens seen, where its sinks are, which ring slots hold real tokens; plus bounds over all rows
    that tell when a decode step may read every slot (its mask is then all-true: see `core.window_plan`)."""

    cursor: int  # columns written so far (pads included); equals `get_seq_length()`
    num_real: torch.Tensor  # [B] real (non-pad) tokens written so far
    sink_column: torch.Tensor  # [B, S] column of each row's j-th real token, -1 while unseen
    ring_real: torch.Tensor  # [B, capacity] whether the token in each allocated ring slot is real (not a pad)
    sinks_complete: bool = False  # every row has all S sinks: no more sink writes to plan
    last_pad_column: int = -1  # newest column that is a pad in some row (-1: none)
    last_sink_column: int = -1  # newest sink column of any row, once the sinks are complete
    #: [B] column of each row's first real token, -1 while unseen: chunked attention counts its chunks from there
    #: (transformers' chunked masks discount each row's left padding), so a chunked group needs it
    first_real_column: torch.Tensor | None = None
    every_row_started: bool = False  # every row has a real token: `first_real_column` is final
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

    def all_true(self, keys: int) -> torch.Tensor:
        """The [B, 1, keys] all-true visibility of a decode step that reads every slot: a view of one kept tensor,
        rebuilt (at least twice as wide) only when the keys outgrow it, so growing costs O(1) per token."""
        memo_key = ("allowed", self.batch)
        allowed = self.memo.get(memo_key)
        if allowed is None or allowed.shape[-1] < keys:
            width = max(keys, 0 if allowed is None else 2 * allowed.shape[-1])
            allowed = self.memo[memo_key] = torch.ones(
                self.batch, 1, width, dtype=torch.bool, device=self.num_real.device
            )
        return allowed[:, :, :keys]
