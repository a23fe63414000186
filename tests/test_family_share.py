"""CI's older legs run a share of the per-family tests each (`CACHELIMIT_FAMILY_SHARE`, tests/conftest.py): the
shares of one day cover every per-family class exactly once, and a bad share is refused."""

from __future__ import annotations

import importlib
import os
import unittest
from pathlib import Path
from unittest import mock

import pytest

import cachelimit
from tests import conftest

TESTS = Path(__file__).resolve().parent


def per_family_classes() -> dict[str, list[str]]:
    """family -> the per-family test classes that check it, from tests/models/ and the ONE_CLASS_PER_FAMILY modules."""
    names = [f"tests.models.{path.stem}" for path in sorted((TESTS / "models").glob("test_*.py"))]
    names += [
        f"tests.{path.stem}" for path in sorted(TESTS.glob("test_*.py")) if "ONE_CLASS_PER_FAMILY" in path.read_text()
    ]
    found: dict[str, list[str]] = {}
    for name in names:
        module = importlib.import_module(name)
        if name.startswith("tests.models.") or getattr(module, "ONE_CLASS_PER_FAMILY", False):
            for value in vars(module).values():
                if isinstance(value, type) and issubclass(value, unittest.TestCase) and hasattr(value, "family"):
                    found.setdefault(conftest.served_family(value.family), []).append(f"{name}.{value.__name__}")
    return found


class FamilyShareTest(unittest.TestCase):
    def test_the_shares_of_a_day_cover_every_per_family_class_once(self):
        found = per_family_classes()
        self.assertIn("tests.test_growth.LlamaGrowthTest", found["llama"])  # the modules are found
        unknown = sorted(set(found) - set(cachelimit.supported_families()))
        self.assertEqual(unknown, [], "a per-family class whose family no share holds would never run on a leg")
        shares = []
        for share in range(3):
            with mock.patch.dict(os.environ, {conftest.FAMILY_SHARE: f"{share}/3"}):
                shares.append(conftest.family_share()[2])
        self.assertEqual(sorted(sum(shares, [])), sorted(cachelimit.supported_families()))

    def test_no_share_runs_every_family_and_a_bad_one_is_refused(self):
        for every in ("", "all"):
            with mock.patch.dict(os.environ, {conftest.FAMILY_SHARE: every}):
                self.assertIsNone(conftest.family_share())
        for bad in ("3/3", "1", "a/3", "-1/3"):
            with (
                mock.patch.dict(os.environ, {conftest.FAMILY_SHARE: bad}),
                pytest.raises(pytest.UsageError, match="CACHELIMIT_FAMILY_SHARE must be k/n"),
            ):
                conftest.family_share()
