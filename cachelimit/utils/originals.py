"""The methods `cachelimit.patch` replaced, so patched methods can call them and `unpatch` can put them back.

It lives at the bottom of the package (no cachelimit imports) because both sides need it: the family patches
(each patched `prepare_inputs_for_generation` calls the original) and the applier that installs them.
"""

from __future__ import annotations

#: stored for a class that did not have the attribute itself (it inherited it): `unpatch` deletes ours
MISSING = object()

#: (class, attribute) -> what the class itself held before `patch` (or MISSING)
ORIGINALS: dict[tuple[type, str], object] = {}


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
