"""Counting the aten ops that eager code dispatches, by name: what a decode step does, and whether it waits for the
device.

A count is exact and the same on every run (no timing), so tests assert it (`tests/test_host_syncs.py`,
`tests/test_compile.py`) and benchmarks report it where a timing on a shared machine would be noise
(`benchmarks/decode_ops.py`, `benchmarks/step_overhead.py`). One counter for all of them, so they count alike.
"""

from __future__ import annotations

import collections

from torch.utils._python_dispatch import TorchDispatchMode

#: Ops whose result the host reads back: on a GPU each one waits for the device (a host sync).
SYNC_OPS = frozenset({"aten._local_scalar_dense", "aten.is_nonzero", "aten.item", "aten.nonzero", "aten.equal"})


class OpCounter(TorchDispatchMode):
    """While active (`with OpCounter() as counter:`), counts every aten op by its name (`aten.index_copy_`) in
    `counter.ops`."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    def total(self) -> int:
        """Every op counted so far."""
        return sum(self.ops.values())


def syncs(ops: collections.Counter[str]) -> int:
    """How many of the counted ops were host syncs (`SYNC_OPS`)."""
    return sum(count for name, count in ops.items() if name in SYNC_OPS)
