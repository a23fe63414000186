"""The external test bed's plan (tests/external/peer_plan.py): the day's rotations cover every file, the same on
every machine, and the runs per mode and per pytest follow from them."""

from __future__ import annotations

import datetime
import unittest

import pytest
from parameterized import parameterized

from .peer_helpers import external

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

plan = external("peer_plan")


class RotationTest(unittest.TestCase):
    FAMILIES = [f"f{index:02d}" for index in range(11)]

    @parameterized.expand([(1,), (3,), (4,), (11,), (20,)])
    def test_consecutive_days_cover_every_file(self, size):
        days = -(-len(self.FAMILIES) // size)
        seen = set()
        for day in range(1000, 1000 + days):
            chosen = plan.rotation(self.FAMILIES, size, day)
            self.assertEqual(len(chosen), min(size, len(self.FAMILIES)))
            self.assertEqual(plan.rotation(list(reversed(self.FAMILIES)), size, day), chosen)
            seen |= set(chosen)
        self.assertEqual(seen, set(self.FAMILIES))

    def test_day_is_the_utc_date(self):
        late = datetime.datetime(2026, 12, 1, 23, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=-5)))
        self.assertEqual(plan.utc_day(late), (datetime.date(2026, 12, 2) - datetime.date(1970, 1, 1)).days)

    def test_plan_runs_limit_everywhere_and_compares_the_rotation(self):
        runs = plan.plan(self.FAMILIES, ["limit", "patched", "unpatched"], 3, day=0)
        self.assertEqual([family for family, mode in runs if mode == "limit"], self.FAMILIES)
        for mode in ("unpatched", "patched"):
            self.assertEqual([family for family, m in runs if m == mode], ["f00", "f01", "f02"])
        self.assertEqual(runs[:3], [("f00", "unpatched"), ("f00", "patched"), ("f00", "limit")])
        self.assertEqual(len(plan.plan(self.FAMILIES, plan.MODES, None, day=0)), len(plan.MODES) * len(self.FAMILIES))

    def test_limit_rotates_on_its_own_when_asked(self):
        runs = plan.plan(self.FAMILIES, plan.MODES, 3, day=1, rotate_limit=5)
        self.assertEqual([family for family, mode in runs if mode == "limit"], ["f05", "f06", "f07", "f08", "f09"])
        self.assertEqual([family for family, mode in runs if mode == "patched"], ["f03", "f04", "f05"])
        days = [{family for family, _ in plan.plan(self.FAMILIES, ["limit"], None, day, 5)} for day in range(3)]
        self.assertEqual(set.union(*days), set(self.FAMILIES))

    def test_cut_rotates_on_its_own_when_asked(self):
        runs = plan.plan(self.FAMILIES, plan.MODES, 3, day=1, rotate_limit=5, rotate_cut=2)
        self.assertEqual([family for family, mode in runs if mode == "limit-cut"], ["f02", "f03"])
        self.assertEqual([family for family, mode in runs if mode == "limit"], ["f05", "f06", "f07", "f08", "f09"])
        every = plan.plan(self.FAMILIES, ["limit-cut"], 3, day=1, rotate_limit=5)
        self.assertEqual([family for family, _ in every], self.FAMILIES)
        days = [
            {family for family, _ in plan.plan(self.FAMILIES, ["limit-cut"], None, day, None, 2)} for day in range(6)
        ]
        self.assertEqual(set.union(*days), set(self.FAMILIES))

    def test_batches_one_pytest_per_mode_or_per_file(self):
        runs = plan.plan(["a", "b", "c"], plan.MODES, 1, day=1, rotate_cut=2)
        self.assertEqual(plan.batches(runs, batch=False), [(mode, [family]) for family, mode in runs])
        expected = [("unpatched", ["b"]), ("patched", ["b"]), ("limit", ["a", "b", "c"]), ("limit-cut", ["a", "c"])]
        self.assertEqual(plan.batches(runs, batch=True), expected)
        self.assertEqual(plan.batches([], batch=True), [])


class DefaultLimitsTest(unittest.TestCase):
    """`limit` must never cut the testers' sequences and `limit-cut` must cut every one, prefill included: read
    from the testers' shared defaults where the installed transformers has them (5.x)."""

    def test_limit_never_cuts_and_limit_cut_cuts_every_prompt(self):
        from transformers import testing_utils

        defaults = getattr(testing_utils, "_TEXT_MODEL_TESTER_DEFAULTS", None)
        if defaults is None:
            self.skipTest("this transformers has no shared text-model tester defaults")
        self.assertEqual(set(plan.DEFAULT_LIMITS), set(plan.MODES) - {"unpatched", "patched"})
        self.assertGreaterEqual(plan.DEFAULT_LIMITS["limit"], defaults["max_position_embeddings"])
        self.assertLess(plan.DEFAULT_LIMITS["limit-cut"], defaults["seq_length"])
        self.assertGreaterEqual(plan.DEFAULT_LIMITS["limit-cut"], 1)
