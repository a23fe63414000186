"""The alternating measurement (`cachelimit.bench.alternate`): CPU-time ratios paired per repeat, wall beside them,
a rotating order, and bad input refused before anything runs. Real clocks on fake work of known relative cost, and a
fake clock where the exact pairing is what is checked."""

from __future__ import annotations

import dataclasses
import json
import time
import unittest

import pytest
from parameterized import parameterized

from cachelimit.bench import alternate
from cachelimit.bench.alternate import Measurement, Timing, measure

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


def burn(units: int) -> None:
    """CPU work proportional to `units` (a pure Python loop: no sleeping, no I/O)."""
    total = 0
    for i in range(units * 20_000):
        total += i * i
    return total


class FakeClock:
    """Stands for the module's `time`: process_time and perf_counter move only when a variant spends."""

    def __init__(self):
        self.cpu = self.wall = 0.0

    def process_time(self) -> float:
        return self.cpu

    def perf_counter(self) -> float:
        return self.wall

    def spend(self, cpu: float, wall: float) -> None:
        self.cpu += cpu
        self.wall += wall


class RealClockTest(unittest.TestCase):
    def test_twice_the_loop_is_twice_the_cpu_and_sleeping_costs_wall_not_cpu(self):
        # calls of 10-30 ms of CPU, 7 repeats: a 1 ms call's CPU time moved by a third on a loaded 2-core machine
        m = measure(
            {"a": lambda: burn(10), "b": lambda: burn(20), "sleep": lambda: time.sleep(0.02)},
            baseline="a",
            repeats=7,
        )
        double, sleep = m.summary("b"), m.summary("sleep")
        self.assertTrue(1.6 < double["ratio_median"] < 2.5, double)
        self.assertLessEqual(double["ratio_min"], double["ratio_median"])
        self.assertLessEqual(double["ratio_median"], double["ratio_max"])
        self.assertLess(sleep["ratio_median"], 0.25, sleep)  # almost no CPU ...
        self.assertGreaterEqual(sleep["wall_s_median"], 0.02)  # ... but all of its wall time
        self.assertEqual(m.ratios("a"), [1.0] * 7)
        self.assertEqual((double["n"], len(m.variants["sleep"])), (7, 7))
        self.assertEqual(len(m.load_before), 3)
        self.assertEqual(len(m.load_after), 3)
        self.assertGreaterEqual(m.cores, 1)


class PairingTest(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        self.real_time = alternate.time
        alternate.time = self.clock
        self.addCleanup(setattr, alternate, "time", self.real_time)

    def spender(self, costs: list[float], wall: float = 1.0):
        """A variant whose timed call k (warm-up first, untimed) spends costs[k] CPU seconds."""
        calls = iter(costs)
        return lambda: self.clock.spend(next(calls), wall)

    def test_each_ratio_pairs_the_same_repeat(self):
        # baseline cost swings 10x between repeats; the variant is exactly 3x the baseline within each repeat, so
        # only a same-repeat pairing gives 3.0 every time (medians of each side, or another pairing, would not)
        base = [5.0, 1.0, 10.0, 2.0]
        m = measure(
            {"base": self.spender(base), "triple": self.spender([3 * c for c in base], wall=2.0)},
            baseline="base",
            repeats=3,
        )
        self.assertEqual(m.ratios("triple"), [3.0, 3.0, 3.0])
        self.assertEqual(m.wall_ratios("triple"), [2.0, 2.0, 2.0])
        self.assertEqual([t.cpu_s for t in m.variants["base"]], [1.0, 10.0, 2.0])  # warm-up (5.0) left out
        summary = m.summary("triple")
        self.assertEqual((summary["ratio_median"], summary["ratio_min"], summary["ratio_max"]), (3.0, 3.0, 3.0))
        self.assertEqual((summary["cpu_s_median"], summary["wall_s_median"], summary["n"]), (6.0, 2.0, 3))
        other = dataclasses.replace(m, baseline="triple")  # the same data against another baseline
        self.assertEqual(other.ratios("base"), [1 / 3] * 3)

    def test_table_and_json_carry_the_spread_and_the_conditions(self):
        m = measure(
            {"base": self.spender([1, 1, 2, 4]), "half": self.spender([1, 0.5, 0.5, 3])}, baseline="base", repeats=3
        )
        table = m.table(per="generate call")
        self.assertIn("| half | 0.50 [0.25, 0.75] | 0.5 | 1 | 3 |", table)
        self.assertIn("median CPU s per generate call", table)
        self.assertIn("Load average", table)
        self.assertIn(f"torch threads {m.threads}", table)
        data = json.loads(json.dumps(m.to_json()))
        self.assertEqual(
            data["variants"]["half"],
            [{"cpu_s": 0.5, "wall_s": 1.0}, {"cpu_s": 0.5, "wall_s": 1.0}, {"cpu_s": 3, "wall_s": 1.0}],
        )
        self.assertEqual(data["summary"]["half"]["ratio_median"], 0.5)
        self.assertEqual(data["baseline"], "base")

    def test_a_variant_returning_a_timing_records_its_own_section_only(self):
        # a call that spends 5 s of set-up (a prefill, warm-up steps) then returns the clock of its steady section
        def steady(cost: float):
            def call():
                self.clock.spend(5.0, 5.0)
                cpu, wall = self.clock.process_time(), self.clock.perf_counter()
                self.clock.spend(cost, 2 * cost)
                return Timing(self.clock.process_time() - cpu, self.clock.perf_counter() - wall)

            return call

        m = measure(
            {"base": steady(1.0), "double": steady(2.0), "whole": lambda: self.clock.spend(3.0, 3.0)},
            baseline="base",
            repeats=3,
        )
        self.assertEqual([t.cpu_s for t in m.variants["base"]], [1.0] * 3)  # the 5 s around it left out
        self.assertEqual(m.ratios("double"), [2.0] * 3)
        self.assertEqual(m.wall_ratios("double"), [2.0] * 3)
        self.assertEqual(m.ratios("whole"), [3.0] * 3)  # a call returning anything else is timed whole

    def test_a_baseline_without_cpu_time_gives_nan_not_an_error(self):
        m = Measurement({"a": [Timing(0.0, 1.0)], "b": [Timing(1.0, 1.0)]}, "a", (0, 0, 0), (0, 0, 0), 1, 2)
        self.assertNotEqual(m.ratios("b")[0], m.ratios("b")[0])


class OrderTest(unittest.TestCase):
    def run_recorded(self, rotate: bool, repeats: int = 4, warmup: int = 1) -> tuple[list[str], Measurement]:
        log: list[str] = []
        variants = {name: (lambda name=name: log.append(name)) for name in "abc"}
        m = measure(
            variants,
            baseline="b",
            repeats=repeats,
            warmup=warmup,
            rotate=rotate,
            setup=lambda n: log.append(f"setup {n}"),
        )
        return log, m

    def test_the_order_rotates_and_setup_runs_before_every_call(self):
        log, m = self.run_recorded(rotate=True)
        rounds = [["a", "b", "c"], ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]  # warm-up first
        self.assertEqual(log, [entry for order in rounds for name in order for entry in (f"setup {name}", name)])
        self.assertEqual(m.orders, rounds[1:])

    def test_without_rotation_the_order_is_the_given_one(self):
        log, m = self.run_recorded(rotate=False, repeats=3, warmup=0)
        self.assertEqual(log[1::2], ["a", "b", "c"] * 3)
        self.assertEqual(m.orders, [["a", "b", "c"]] * 3)


class BadInputTest(unittest.TestCase):
    @parameterized.expand(
        [
            ("unknown_baseline", {"baseline": "z"}, ValueError, r"baseline='z'.*'a', 'b'"),
            ("no_repeats", {"repeats": 0}, ValueError, r"repeats must be an int >= 1, got 0"),
            ("float_repeats", {"repeats": 2.5}, ValueError, r"repeats must be an int >= 1"),
            ("bool_repeats", {"repeats": True}, ValueError, r"repeats must be an int >= 1"),
            ("negative_warmup", {"warmup": -1}, ValueError, r"warmup must be an int >= 0, got -1"),
            ("setup_not_callable", {"setup": 3}, TypeError, r"setup must be None or a callable"),
            ("no_variants", {"variants": {}}, ValueError, r"variants must be a non-empty dict"),
            ("not_callable", {"variants": {"a": 1}}, TypeError, r"variants\['a'\] must be callable"),
        ]
    )
    def test_refused_before_anything_runs(self, _, change, error, message):
        ran: list[str] = []
        arguments = {"variants": {"a": lambda: ran.append("a"), "b": lambda: ran.append("b")}, "baseline": "a"}
        arguments.update(change)
        with self.assertRaisesRegex(error, message):
            measure(arguments.pop("variants"), **arguments)
        self.assertEqual(ran, [])

    def test_an_unknown_variant_name_is_refused_with_the_names(self):
        m = Measurement({"a": [Timing(1.0, 1.0)]}, "a", (0, 0, 0), (0, 0, 0), 1, 2)
        with self.assertRaisesRegex(ValueError, r"name='x' is not one of the variants: 'a'"):
            m.ratios("x")
        with self.assertRaisesRegex(ValueError, r"baseline='x'"):
            dataclasses.replace(m, baseline="x")
