"""The ring: where each token's key and value live in a bounded layer, and how the ring grows.

This is the one explanation of the ring and its growth; the rest of the code links here.

A *column* is the index of a token in the sequence a cache has seen, pads included (the column of the 2D attention
mask `generate` keeps). A bounded layer is a slot store: `S` *sink* slots (each row's first `S` real tokens), then a
*ring* of at most `R = L - S + 1` slots for the most recent tokens, `L` being the limit.

Placement: column `c` always lives in ring slot `c % R`. Once full, the ring holds the last `L - S` columns plus the
slot the next token overwrites. That one extra slot is what makes a decode step a single in-place write: the token
being decoded must sit in the same tensor as the positions it attends to, so any layout that holds only `L` between
steps has to copy the window (or concatenate) at every step. Attention does not care in which slot a key sits, only
what the mask allows, so nothing is ever shifted, rolled or concatenated while decoding (transformers' own
sliding-window layers copy the window every step).

Growth: a large `L` is a cap, not a preallocation. The ring's *capacity* (slots allocated) follows the columns seen:
when a step needs more slots than are allocated, the ring is reallocated to `max(needed, 2 x capacity)` slots, never
more than `R` (`grown_capacity`), so the copies cost amortised O(1) per token and no buffer is ever sized by the
limit. While the capacity is below `R`, no column has wrapped (`c < capacity <= R`, so `c % R == c`): growing copies
the allocated prefix and moves no token, and a decode step reads only the `min(columns, R)` slots written so far
(`written_slots`), so until the window is full a bounded run attends over exactly the keys an unbounded one does.
"""

from __future__ import annotations

import torch


def slot_of(column, ring: int):
    """The ring slot of a column (an int or a tensor of columns)."""
    return column % ring


def written_slots(columns: int, ring: int) -> int:
    """Ring slots holding a token once `columns` columns have been written: all of them once the ring has wrapped."""
    return min(columns, ring)


def slot_columns(newest: int, slots: int, ring: int, device: torch.device) -> torch.Tensor:
    """[slots] the column each of the first `slots` ring slots holds once column `newest` has been written: the
    latest column `<= newest` that maps to that slot (negative for a slot not written yet)."""
    slot = torch.arange(slots, device=device)
    return newest - slot_of(newest - slot, ring)


def grown_capacity(capacity: int, needed: int, ring: int) -> int:
    """Ring slots to allocate so that `needed` fit: at least double the current capacity when it must grow (so the
    copies a growth makes are amortised O(1) per token), at most the ring size."""
    if needed <= capacity:
        return capacity
    return min(ring, max(needed, 2 * capacity))
