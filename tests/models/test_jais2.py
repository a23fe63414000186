"""Jais 2: the family oracles."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Jais2FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "jais2"
