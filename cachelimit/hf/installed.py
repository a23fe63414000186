"""What `cachelimit.patch` installed on model classes, kept so that patched methods can call the ones they replaced,
`unpatch` can put them back, and the integration can find a patched model's family.

It sits at the bottom of the integration (no cachelimit imports) because every side needs it: the shared
`prepare_inputs_for_generation` calls the original, the applier installs and removes, `generate` and the cache kinds
read the family the applier attached to the class.
"""

from __future__ import annotations

from typing import Any

#: stored for a class that did not have the attribute itself (it inherited it): `unpatch` deletes ours
MISSING = object()

#: (class, attribute) -> what the class itself held before `patch` (or MISSING)
ORIGINALS: dict[tuple[type, str], object] = {}

#: the class attribute through which a patched class names its family (a `cachelimit.families.Family`)
FAMILY_ATTRIBUTE = "_cachelimit_family"


def is_replaced(cls: type, attribute: str) -> bool:
    """Whether `cls` or one of its bases has `attribute` replaced by cachelimit."""
    return any((klass, attribute) in ORIGINALS for klass in cls.__mro__)


def original_attribute(cls: type, attribute: str):
    """The method `patch` replaced on `cls` (or on its nearest patched base class)."""
    for klass in cls.__mro__:
        if (klass, attribute) in ORIGINALS:
            original = ORIGINALS[(klass, attribute)]
            # A class without its own attribute inherited it: the original is the next one up the MRO.
            return getattr(super(klass, klass), attribute) if original is MISSING else original
    raise RuntimeError(f"{cls.__name__}.{attribute} is not patched by cachelimit.")


def family_of(model) -> Any:
    """The family of a model whose class `cachelimit.patch` has patched (an error naming the fix otherwise)."""
    family = getattr(type(model), FAMILY_ATTRIBUTE, None)
    if family is None or not is_replaced(type(model), "prepare_inputs_for_generation"):
        raise ValueError(f"{type(model).__name__} is not patched; call cachelimit.patch() first.")
    return family
