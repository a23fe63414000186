"""The shared applier: `patch`/`unpatch` install and remove cachelimit's methods on the registered families.

Import order is the dependency order: the applier (families, originals) first, then `generate`, which hands
its method to the applier.
"""

from ..family import register_family
from .applier import FAMILIES, Family, is_patched, original_attribute, patch, patched, unpatch
from .generate import generate

__all__ = [
    "FAMILIES",
    "Family",
    "generate",
    "is_patched",
    "original_attribute",
    "patch",
    "patched",
    "register_family",
    "unpatch",
]
