"""InternLM3: the family oracles on its own config, which transformers builds into `LlamaForCausalLM`."""

from __future__ import annotations

import unittest

from tests.family_mixin import FamilyOracleMixin


class Internlm3FamilyTest(FamilyOracleMixin, unittest.TestCase):
    family = "internlm3"
