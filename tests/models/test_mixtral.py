"""Mixtral: the family oracles and transformers' own `sliding_window`."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin, NativeWindowOracleMixin


class MixtralFamilyTest(FamilyOracleMixin, NativeWindowOracleMixin, unittest.TestCase):
    family = "mixtral"
