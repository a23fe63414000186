"""Install and remove cachelimit's methods on model classes, keeping the originals.

Patching the class (not an instance) means models created before `patch()` see it too, and `unpatch()` puts back
exactly what was there: the class's own attribute, or nothing when it was inherited (`hf.installed`).

Every patched class gets the same methods (`METHODS`: the shared `prepare_inputs_for_generation`, `generate`,
`set_cache_implementation` and the builder `BoundedCache.from_model` calls) plus its family (`FAMILY_ATTRIBUTE`, which
tells `generate` how to find the model's rotary and where its positions end). The family table itself lives above
the integration (`cachelimit.families`) and is handed in: the applier imports nothing above it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import transformers

from .cache_setting import set_cache_implementation
from .generate import generate
from .installed import FAMILY_ATTRIBUTE, MISSING, ORIGINALS
from .layout import cache_for_model
from .prepare import forwards_embeds, prepare_inputs_for_generation, prepare_inputs_without_embeds

#: what `patch` installs on every model class of a family
METHODS: dict[str, Callable] = {
    "prepare_inputs_for_generation": prepare_inputs_for_generation,
    "generate": generate,
    "set_cache_implementation": set_cache_implementation,
    "_cachelimit_bounded_cache": cache_for_model,
}
_PATCHED: set[str] = set()


def _names(families: Mapping[str, Any], names: tuple[str, ...]) -> list[str]:
    """The families named (all those the installed transformers has, when none is), checked."""
    if not names:
        return [name for name, family in families.items() if family.available]
    unknown = [name for name in names if name not in families]
    if unknown:
        raise ValueError(
            f"Unsupported model family {unknown[0]!r} (families are named by config.model_type); supported "
            f"families: {', '.join(sorted(families))}."
        )
    missing = [name for name in names if not families[name].available]
    if missing:
        family = families[missing[0]]
        raise ValueError(
            f"Model family {missing[0]!r} is supported, but transformers {transformers.__version__} does not have it "
            f"({', '.join(family.class_names)}): it came in a later release; upgrade transformers to use it."
        )
    return list(dict.fromkeys(names))


def patch(families: Mapping[str, Any], *names: str) -> None:
    """Install cachelimit on the named families of `families` (all when none is named). Idempotent."""
    for name in _names(families, names):
        if name in _PATCHED:
            continue
        family = families[name]
        for cls in family.model_classes:
            methods = {**METHODS, FAMILY_ATTRIBUTE: family}
            if not forwards_embeds(cls.prepare_inputs_for_generation):  # as transformers reads the original
                methods["prepare_inputs_for_generation"] = prepare_inputs_without_embeds
            for attribute, value in methods.items():
                ORIGINALS[(cls, attribute)] = cls.__dict__.get(attribute, MISSING)
                setattr(cls, attribute, value)
        _PATCHED.add(name)


def unpatch(families: Mapping[str, Any], *names: str) -> None:
    """Restore the original methods of the named families (all when none is named). Idempotent."""
    for name in _names(families, names):
        if name not in _PATCHED:
            continue
        for cls in families[name].model_classes:
            for attribute in (*METHODS, FAMILY_ATTRIBUTE):
                original = ORIGINALS.pop((cls, attribute))
                if original is MISSING:
                    delattr(cls, attribute)
                else:
                    setattr(cls, attribute, original)
        _PATCHED.discard(name)


def is_patched(family: str) -> bool:
    return family in _PATCHED


@contextlib.contextmanager
def patched(families: Mapping[str, Any], *names: str) -> Iterator[None]:
    """Patch the named families for the block, then unpatch those this call patched (families that were already
    patched stay patched)."""
    newly = [name for name in _names(families, names) if name not in _PATCHED]
    if newly:
        patch(families, *newly)
    try:
        yield
    finally:
        if newly:
            unpatch(families, *newly)
