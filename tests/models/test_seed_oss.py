"""Seed-OSS: the family oracles."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class SeedOssFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "seed_oss"
