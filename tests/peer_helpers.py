"""Import the external test bed's modules (tests/external/) as its runner does: that folder first on the path."""

from __future__ import annotations

import importlib
import sys
from unittest import mock

from .cli_helpers import REPO

EXTERNAL = REPO / "tests" / "external"


def external(name: str):
    """A module of tests/external/, imported as the runner imports it (that folder first on the path)."""
    with mock.patch.object(sys, "path", [str(EXTERNAL), *sys.path]):
        return importlib.import_module(name)
