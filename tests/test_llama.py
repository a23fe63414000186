"""Llama: the shared bounded-generation and attention-sink tests."""

from __future__ import annotations

import unittest

from tests.bounded_mixin import BoundedGenerationTesterMixin
from tests.sink_mixin import SinkTesterMixin


class LlamaBoundedGenerationTest(BoundedGenerationTesterMixin, SinkTesterMixin, unittest.TestCase):
    family = "llama"
    uses_rope = True
