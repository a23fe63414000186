"""How a scored layer (`core.scored_layer`) picks the slot a decode step frees, and the small helpers of its step.

Apart from the layer because they are pure functions of tensors: the tie rule they carry out is the one the
reference tests (`tests/test_scored_policy.py`) check, and none of them keeps state.
"""

from __future__ import annotations

import torch

from .eviction import working_dtype


def evicted_slot(
    priority: torch.Tensor, column: torch.Tensor, pads: bool = True, out: torch.Tensor | None = None
) -> torch.Tensor:
    """[B, H] the slot to free: the highest eviction priority; among equal ones the most recent column (the rule
    a compaction follows too: the older is kept), and among pads (+inf) the lowest slot, as every head of the row
    has its pads in the same slots (`core.scored`). `pads=False`: no slot holds a pad (a steady step). `out`: a
    [B, H] long tensor to write it into."""
    top = priority.amax(-1, keepdim=True)
    tie = first_slots(column, priority.shape[-1])
    if pads:
        slots = torch.arange(priority.shape[-1], device=priority.device)
        tie = torch.where(top == float("inf"), -slots, tie)
    return torch.argmax(torch.where(priority == top, tie, torch.iinfo(tie.dtype).min), -1, out=out)


def first_slots(tensor: torch.Tensor, count: int) -> torch.Tensor:
    """`tensor`'s first `count` slots (its last axis), without a view op when that is all of them (a host-bound
    decode step pays for each op it dispatches)."""
    return tensor if tensor.shape[-1] == count else tensor[..., :count]


def float_workspace(memo: dict, keys: torch.Tensor) -> torch.Tensor | None:
    """A float32 tensor of the shape of a steady step's half-precision `keys`, kept in the group's `memo` and shared
    by its layers (they run one after another), for KeyDiff to convert the keys into; None for float32 keys, or
    inside a compiled graph, which plans its own buffers."""
    work = working_dtype(keys.dtype)
    if work == keys.dtype or torch.compiler.is_compiling():
        return None
    key = ("float_keys", tuple(keys.shape), keys.device)
    if key not in memo:
        memo[key] = torch.empty(keys.shape, dtype=work, device=keys.device)
    return memo[key]
