"""Ministral (every layer sliding): the family oracles and transformers' own window."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class MinistralFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "ministral"
