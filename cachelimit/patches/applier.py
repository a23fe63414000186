"""Install and remove cachelimit's methods on model classes, keeping the originals.

Patching the class (not an instance) means models created before `patch()` see it too, and `unpatch()`
puts back exactly what was there: the class's own attribute, or nothing when it was inherited.

Each family brings its own `prepare_inputs_for_generation` (`cachelimit.family`); the methods every family
shares (`generate`, `set_cache_implementation`) are handed to the applier by the modules that define them
(`install_on_patch`), so the applier depends on nothing above it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from .. import models  # noqa: F401  (imports every family module, which registers the family)
from ..family import FAMILIES, Family, family_of
from ..utils.originals import MISSING, ORIGINALS, original_attribute

#: methods installed on every patched class besides the family's own `prepare_inputs_for_generation`
SHARED_METHODS: dict[str, Callable] = {}
_PATCHED: set[str] = set()


def install_on_patch(name: str, method: Callable) -> Callable:
    """Have `patch` install `method` as `name` on every patched class (used by `generate` and the registry)."""
    if _PATCHED:
        raise RuntimeError(f"install_on_patch({name!r}) after patch(): unpatch() first.")
    SHARED_METHODS[name] = method
    return method


def _methods(family: Family) -> dict[str, Callable]:
    return {"prepare_inputs_for_generation": family.prepare_inputs_for_generation, **SHARED_METHODS}


def _names(families: tuple[str, ...]) -> list[str]:
    if not families:
        return list(FAMILIES)
    unknown = [name for name in families if name not in FAMILIES]
    if unknown:
        raise ValueError(
            f"Unsupported model family {unknown[0]!r} (families are named by config.model_type); supported "
            f"families: {', '.join(sorted(FAMILIES))}."
        )
    return list(dict.fromkeys(families))


def patch(*families: str) -> None:
    """Install cachelimit on the given families (all supported ones when none is named). Idempotent."""
    for name in _names(families):
        if name in _PATCHED:
            continue
        family = FAMILIES[name]
        for cls in family.model_classes:
            for attribute, method in _methods(family).items():
                ORIGINALS[(cls, attribute)] = cls.__dict__.get(attribute, MISSING)
                setattr(cls, attribute, method)
        _PATCHED.add(name)


def unpatch(*families: str) -> None:
    """Restore the original methods of the given families (all when none is named). Idempotent."""
    for name in _names(families):
        if name not in _PATCHED:
            continue
        family = FAMILIES[name]
        for cls in family.model_classes:
            for attribute in _methods(family):
                original = ORIGINALS.pop((cls, attribute))
                if original is MISSING:
                    delattr(cls, attribute)
                else:
                    setattr(cls, attribute, original)
        _PATCHED.discard(name)


def is_patched(family: str) -> bool:
    return family in _PATCHED


@contextlib.contextmanager
def patched(*families: str) -> Iterator[None]:
    """`with cachelimit.patched("qwen3"): ...`: patch the families (all when none is named) for the block, then
    unpatch those this call patched (families that were already patched stay patched)."""
    newly = [name for name in _names(families) if name not in _PATCHED]
    if newly:
        patch(*newly)
    try:
        yield
    finally:
        if newly:
            unpatch(*newly)


__all__ = [
    "FAMILIES",
    "Family",
    "family_of",
    "install_on_patch",
    "is_patched",
    "original_attribute",
    "patch",
    "patched",
    "unpatch",
]
