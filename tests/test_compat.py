"""`cachelimit.hf.compat`: the supported range is declared once and agrees everywhere; the bridges do what they say."""

from __future__ import annotations

import importlib.util
import re
import unittest
import warnings
from pathlib import Path

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import cachelimit
from cachelimit.hf import compat
from cachelimit.hf.masks import transformers_mask

REPO = Path(__file__).resolve().parent.parent


class SupportedRangeTest(unittest.TestCase):
    def test_pyproject_declares_the_compat_range(self):
        declared = re.search(r'"transformers([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
        self.assertEqual(SpecifierSet(declared), SpecifierSet(compat.SUPPORTED_RANGE))
        self.assertEqual(cachelimit.SUPPORTED_RANGE, compat.SUPPORTED_RANGE)

    def test_the_ci_legs_read_the_same_range(self):
        """tools/leg.py reads the range from the source, without importing cachelimit (it runs with any Python): the
        values it reads are the package's."""
        spec = importlib.util.spec_from_file_location("leg", REPO / "tools" / "leg.py")
        leg = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(leg)
        oldest, first_unsupported, excluded = leg.supported_range()
        self.assertEqual(
            (oldest, first_unsupported, excluded),
            (compat.OLDEST_SUPPORTED, compat.FIRST_UNSUPPORTED, compat.EXCLUDED_SERIES),
        )

    def test_readme_test_command_pins_a_supported_release(self):
        pins = re.findall(r"transformers==([0-9.]+)", (REPO / "README.md").read_text(encoding="utf-8"))
        self.assertTrue(pins)
        for pin in pins:
            self.assertTrue(compat.is_supported(Version(pin)), pin)

    def test_this_transformers_is_supported(self):
        self.assertTrue(compat.is_supported(), f"the tests run on transformers {compat.TRANSFORMERS}")

    def test_outside_the_range_warns_naming_it(self):
        oldest, first_unsupported = Version(compat.OLDEST_SUPPORTED), Version(compat.FIRST_UNSUPPORTED)
        for outside in (Version("4.56.2"), Version("5.0.0"), Version("5.2.1"), first_unsupported, Version("6.0.0")):
            # catch_warnings, not assertWarns: that one walks sys.modules, which on some releases imports
            # transformers' lazy vision modules (torchvision is not installed)
            with self.subTest(version=str(outside)), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compat.check_supported(outside)
            self.assertEqual([warning.category for warning in caught], [UserWarning])
            message = str(caught[0].message)
            self.assertIn(f"transformers {outside} is installed", message)
            self.assertIn(compat.SUPPORTED_RANGE, message)
            self.assertIn(f"tools/leg.py {outside}", message)
        for inside in (
            oldest,
            Version("5.12.1"),
            Version(f"{first_unsupported.major}.{first_unsupported.minor - 1}.9"),
        ):
            with self.subTest(version=str(inside)), warnings.catch_warnings():
                warnings.simplefilter("error")
                compat.check_supported(inside)

    def test_require_names_the_release_and_the_installed_one(self):
        compat.require("anything", compat.OLDEST_SUPPORTED)  # always there
        with self.assertRaisesRegex(ValueError, rf"a feature needs transformers >= 99\.0\.0.*{compat.TRANSFORMERS}"):
            compat.require("a feature", "99.0.0")


class CacheArgumentTest(unittest.TestCase):
    def test_either_name_is_read_and_the_release_name_is_passed_on(self):
        cache = object()
        for name in ("past_key_values", "cache"):
            with self.subTest(name=name):
                kwargs = {name: cache, "attention_mask": None}
                if name == compat.CACHE_ARGUMENT or name == "past_key_values":
                    self.assertIs(compat.passed_cache(kwargs), cache)
                self.assertEqual(
                    compat.with_cache(kwargs, cache), {"attention_mask": None, compat.CACHE_ARGUMENT: cache}
                )
        self.assertIsNone(compat.passed_cache({"attention_mask": None}))


class QueryArgumentsTest(unittest.TestCase):
    def test_mask_builder_sees_queries_from_column_zero(self):
        allowed = torch.tensor([[[True, False, True], [False, True, True]]])
        mask = transformers_mask(_Config("sdpa"), allowed, torch.float32)
        self.assertTrue(torch.equal(mask[:, 0], allowed))
        additive = transformers_mask(_Config("eager"), allowed, torch.float32)
        self.assertTrue(torch.equal(additive[:, 0] == 0, allowed))


class _Config:
    def __init__(self, implementation: str):
        self._attn_implementation = implementation
