"""HunYuan dense: the family oracles; it normalises keys after the rotation, so sinks are refused."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class HunyuanV1DenseFamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "hunyuan_v1_dense"
    notes = "q/k norms after the rotation"
    sink_refusal = "it normalises keys after the rotation"
