"""`cachelimit.patch`, `unpatch`, `patched` and `is_patched`: the applier (`hf.applier`) over the family table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..hf import applier
from .table import FAMILIES


def patch(*families: str) -> None:
    """Install cachelimit on the given families (all supported ones when none is named). Idempotent."""
    applier.patch(FAMILIES, *families)


def unpatch(*families: str) -> None:
    """Restore the original methods of the given families (all when none is named). Idempotent."""
    applier.unpatch(FAMILIES, *families)


def is_patched(family: str) -> bool:
    return applier.is_patched(family)


@contextlib.contextmanager
def patched(*families: str) -> Iterator[None]:
    """`with cachelimit.patched("qwen3"): ...`: patch the families (all when none is named) for the block, then
    unpatch those this call patched (families that were already patched stay patched)."""
    with applier.patched(FAMILIES, *families):
        yield
