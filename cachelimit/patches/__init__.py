"""The shared applier: families register here, `patch`/`unpatch` install and remove their methods."""

from .applier import FAMILIES, Family, is_patched, original_attribute, patch, register_family, unpatch

__all__ = ["FAMILIES", "Family", "is_patched", "original_attribute", "patch", "register_family", "unpatch"]
