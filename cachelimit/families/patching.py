"""`cachelimit.patch`, `unpatch`, `patched` and `is_patched`: the applier (`hf.applier`) over the family table.

Names are model types: a family's own (`FAMILIES`) or one of its aliases (model types transformers builds into the
same classes); a refused model type raises its reason (`families.refusals`), and a family the installed
transformers does not have yet raises naming what is missing. `patch()` with no name patches every family the
installed transformers has.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..hf import applier
from .refusals import REFUSALS, not_served
from .table import FAMILIES, SERVED_TYPES


def _families(names: tuple[str, ...]) -> tuple[str, ...]:
    """The family names `names` ask for (aliases resolved); every available family when none is named."""
    if not names:
        return tuple(name for name, family in FAMILIES.items() if family.available)
    resolved = []
    for name in names:
        if name in REFUSALS:
            raise ValueError(not_served(name))
        family = SERVED_TYPES.get(name)
        if family is None:
            resolved.append(name)  # the applier's error lists the supported families
            continue
        if not family.available:
            import transformers

            raise ValueError(
                f"Model type {name!r} is served by cachelimit, but transformers {transformers.__version__} does not "
                f"have it (missing: {', '.join(family.missing)}): install a newer transformers."
            )
        resolved.append(family.name)
    return tuple(dict.fromkeys(resolved))


def patch(*families: str) -> None:
    """Install cachelimit on the given families (every one the installed transformers has when none is named).
    Idempotent. A name is a `config.model_type`."""
    applier.patch(FAMILIES, *_families(families))


def unpatch(*families: str) -> None:
    """Restore the original methods of the given families (all when none is named). Idempotent."""
    applier.unpatch(FAMILIES, *(_families(families) if families else ()))


def is_patched(family: str) -> bool:
    served = SERVED_TYPES.get(family)
    return applier.is_patched(served.name if served is not None else family)


@contextlib.contextmanager
def patched(*families: str) -> Iterator[None]:
    """`with cachelimit.patched("qwen3"): ...`: patch the families (all when none is named) for the block, then
    unpatch those this call patched (families that were already patched stay patched)."""
    with applier.patched(FAMILIES, *_families(families)):
        yield
