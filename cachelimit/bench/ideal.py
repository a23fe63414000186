"""The "ideal" cache of the benchmark: the cheapest bounded decode, against which cachelimit's overhead is measured.

It keeps no per-step plan and supports no padding, sinks or beam search; it only does what any bounded cache must
do (write one token into a preallocated buffer) so that its time is the bound for the same model and attention.
"""

from __future__ import annotations

import torch

from ..hf.compat import CacheLayer, query_length


class RingBufferLayer(CacheLayer):
    """The speed bound ("ideal" variant): `slots` preallocated positions; a decode step writes the new token into
    slot `column % slots` (the token leaving the window) and returns the buffer. No plan, no padding support, the
    prompt must fit the buffer: it exists only to time the cheapest bounded decode through the model's own forward.

    It returns the written prefix until the buffer wraps (slots are then in column order), and the whole buffer
    after: every slot then holds one of the last `slots` columns, all visible to the new token, so the mask the
    model builds itself from `get_mask_sizes` is exact (with no padding SDPA then needs no mask at all).
    """

    is_sliding = False

    def __init__(self, slots: int):
        super().__init__()
        self.slots = slots
        self.cumulative_length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        batch, heads, _, dim = key_states.shape
        self.keys = key_states.new_zeros(batch, heads, self.slots, dim)
        self.values = value_states.new_zeros(batch, heads, self.slots, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, count = self.cumulative_length, key_states.shape[-2]
        if count > 1 and start + count > self.slots:
            raise ValueError(f"The ideal ring buffer takes prompts of at most {self.slots} tokens, got {count}.")
        self.cumulative_length += count
        if count == 1:
            slot = start % self.slots
            self.keys[:, :, slot] = key_states[:, :, 0]
            self.values[:, :, slot] = value_states[:, :, 0]
        else:
            self.keys[:, :, start : start + count] = key_states
            self.values[:, :, start : start + count] = value_states
        filled = min(self.cumulative_length, self.slots)  # until it wraps, only the written prefix (a view)
        return self.keys[:, :, :filled], self.values[:, :, :filled]

    def get_mask_sizes(self, queries: int) -> tuple[int, int]:
        seen = self.cumulative_length + query_length(queries)
        return min(seen, self.slots), max(0, seen - self.slots)

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return self.slots
