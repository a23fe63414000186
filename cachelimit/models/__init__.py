"""One small module per supported model family; importing it registers the family (see `cachelimit.family`).

Every module of this package is imported, so adding a family is adding a file: no list to extend.
"""

from __future__ import annotations

import importlib
import pkgutil

FAMILY_MODULES = tuple(
    importlib.import_module(f"{__name__}.{module.name}")
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)
)
