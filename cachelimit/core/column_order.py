"""`ColumnOrder`: each head's slots in column order, kept up to date across decode steps for SnapKV's pooling.

SnapKV max-pools each key's score over the keys nearest to it in position (`core.eviction.pooled`), but a scored
layer's slots are in no order (`core.scored_layer`), so the pooling needs the slots sorted by column. Sorting them
every decode step was the largest cost SnapKV added to a step; yet one step changes the order in one known way: it
writes the newest column into the slot the previous step freed. So when a step frees a slot, the order moves that
slot to its end, and a multi-token forward (which rewrites the slots) or a growth sorts the columns again.
"""

from __future__ import annotations

import torch

#: where an empty slot (column -1) sorts: after every column
AFTER_EVERY_COLUMN = 2**62


class ColumnOrder:
    """`slots` [B, H, slots]: each head's slots by the column they hold, empty slots (column -1) last."""

    def __init__(self, column: torch.Tensor):
        self.refresh(column)

    def refresh(self, column: torch.Tensor) -> None:
        """Sort the slots by `column` ([B, H, slots]; an empty slot sorts after every column, in slot order, which is
        the order a growing layer fills them in)."""
        self.slots = torch.where(column < 0, AFTER_EVERY_COLUMN, column).argsort(dim=-1, stable=True)
        self.others = torch.arange(max(column.shape[-1] - 1, 0), device=column.device)  # positions but the last

    def freed(self, slot: torch.Tensor) -> None:
        """Each head's freed slot ([B, H]) goes to the end: the next decode step writes the newest column there."""
        position = (self.slots == slot[..., None]).to(torch.uint8).argmax(-1, keepdim=True)
        kept = self.slots.gather(-1, self.others + (self.others >= position))  # every slot but the freed one
        self.slots.copy_(torch.cat([kept, slot[..., None]], dim=-1))

    def select(self, indices: torch.Tensor) -> None:
        self.slots = self.slots.index_select(0, indices)

    def repeat(self, repeats: int) -> None:
        self.slots = self.slots.repeat_interleave(repeats, dim=0)
