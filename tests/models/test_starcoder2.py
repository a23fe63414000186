"""Starcoder2: the family oracles and transformers' own `sliding_window`."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class Starcoder2FamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "starcoder2"
    tiny_config = {"sliding_window": None}
