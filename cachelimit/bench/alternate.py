"""One measuring method for every benchmark (issue 28): variants alternated inside one process, repeated, each
reported as a CPU-time ratio to a baseline of the same process and repeat, median [min, max], wall time beside it.

Why: the machines are shared, so a wall-clock time alone says as much about the neighbours as about the code. The
CPU time of this process (`time.process_time()`, all its threads) counts the work done and barely moves when other
jobs take the cores; a ratio to a baseline run in the same repeat, a moment earlier or later, cancels what drifts
(clock speed, caches, load) between repeats; the [min, max] over the repeats shows what is left of the noise.

Order: `warmup` untimed rounds run the variants in the order given; timed repeat r (from 0) runs them starting at
index r mod n and wrapping (names [r:] + names[:r]), so over n repeats each variant runs once in every position and
none always runs first or last (`rotate=False`: always the order given). `setup(name)`, untimed, runs before every
call of that variant, warm-up included (e.g. building a fresh cache); what it returns is ignored.

Steady state: a variant that returns a `Timing` has timed its own section of the call (e.g. the decode steps after
its warm-up steps, read by a clock inside the call), and that section is what is recorded; any other return value is
ignored and the whole call is timed.

    m = measure({"eager": run_eager, "ring": run_ring}, baseline="eager", repeats=5)
    print(m.table(per="generate call"))      # median [min, max] of the per-repeat CPU ratios, wall beside
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Timing:
    """One timed call of one variant: CPU seconds of the whole process and wall-clock seconds."""

    cpu_s: float
    wall_s: float


@dataclass
class Measurement:
    """Every variant's timings in repeat order, the baseline the ratios divide by, and the conditions of the run.

    A ratio pairs a variant's call with the baseline's call of the same repeat. For another baseline of the same
    data: `dataclasses.replace(measurement, baseline=other)`."""

    variants: dict[str, list[Timing]]
    baseline: str
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    threads: int | None
    cores: int | None
    orders: list[list[str]] = field(default_factory=list)  # the order each timed repeat ran the variants in

    def __post_init__(self) -> None:
        _check_name("baseline", self.baseline, self.variants)

    def ratios(self, name: str) -> list[float]:
        """Per repeat: the variant's CPU time / the baseline's CPU time of the same repeat (nan if that is 0)."""
        return _paired(self, name, "cpu_s")

    def wall_ratios(self, name: str) -> list[float]:
        """The same pairing for wall-clock time: to read beside the CPU ratios, never alone."""
        return _paired(self, name, "wall_s")

    def summary(self, name: str) -> dict:
        ratios = self.ratios(name)
        timings = self.variants[name]
        return {
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "wall_ratio_median": statistics.median(self.wall_ratios(name)),
            "cpu_s_median": statistics.median(t.cpu_s for t in timings),
            "wall_s_median": statistics.median(t.wall_s for t in timings),
            "n": len(ratios),
        }

    def conditions(self) -> str:
        """The line every table carries: load averages (1, 5, 15 min) before and after, threads, cores."""
        before, after = (", ".join(f"{x:.2f}" for x in load) for load in (self.load_before, self.load_after))
        return (
            f"Load average {before} before, {after} after (1, 5, 15 min); torch threads {self.threads}, "
            f"{self.cores} CPU cores; CPU ratio = process CPU time / {self.baseline}'s of the same repeat."
        )

    def table(self, per: str = "call") -> str:
        """Markdown: variant | CPU ratio median [min, max] | median CPU s | median wall s | n, then conditions."""
        lines = [
            f"| variant | CPU ratio median [min, max] | median CPU s per {per} | median wall s per {per} | n |",
            "|---|---|---|---|---|",
        ]
        for name in self.variants:
            s = self.summary(name)
            lines.append(
                f"| {name} | {s['ratio_median']:.2f} [{s['ratio_min']:.2f}, {s['ratio_max']:.2f}] | "
                f"{s['cpu_s_median']:.4g} | {s['wall_s_median']:.4g} | {s['n']} |"
            )
        return "\n".join(lines) + "\n\n" + self.conditions() + "\n"

    def to_json(self) -> dict:
        return {
            "baseline": self.baseline,
            "load_before": list(self.load_before),
            "load_after": list(self.load_after),
            "threads": self.threads,
            "cores": self.cores,
            "orders": self.orders,
            "variants": {name: [dataclasses.asdict(t) for t in ts] for name, ts in self.variants.items()},
            "summary": {name: self.summary(name) for name in self.variants},
        }


def measure(
    variants: dict[str, Callable[[], object]],
    *,
    baseline: str,
    repeats: int = 5,
    warmup: int = 1,
    rotate: bool = True,
    setup: Callable[[str], object] | None = None,
) -> Measurement:
    """Run every variant once per repeat (rotating order, see the module), after `warmup` untimed rounds; each
    callable does one unit of work. Refuses bad input before running anything."""
    if not isinstance(variants, dict) or not variants:
        raise ValueError(f"variants must be a non-empty dict of name -> callable, got {variants!r}")
    for name, fn in variants.items():
        if not callable(fn):
            raise TypeError(f"variants[{name!r}] must be callable with no arguments, got {type(fn).__name__}")
    _check_name("baseline", baseline, variants)
    _check_count("repeats", repeats, 1)
    _check_count("warmup", warmup, 0)
    if setup is not None and not callable(setup):
        raise TypeError(f"setup must be None or a callable taking the variant name, got {type(setup).__name__}")
    names = list(variants)
    load_before = os.getloadavg()
    for _ in range(warmup):
        for name in names:
            _call(name, variants[name], setup)
    timings: dict[str, list[Timing]] = {name: [] for name in names}
    orders = []
    for repeat in range(repeats):
        start = repeat % len(names) if rotate else 0
        order = names[start:] + names[:start]
        orders.append(order)
        for name in order:
            timings[name].append(_call(name, variants[name], setup))
    return Measurement(timings, baseline, load_before, os.getloadavg(), _torch_threads(), os.cpu_count(), orders)


def measurement_from_json(data: dict) -> Measurement:
    """The inverse of `Measurement.to_json` (the summary is recomputed, not read)."""
    variants = {name: [Timing(**timing) for timing in timings] for name, timings in data["variants"].items()}
    return Measurement(
        variants,
        data["baseline"],
        tuple(data["load_before"]),
        tuple(data["load_after"]),
        data["threads"],
        data["cores"],
        data.get("orders", []),
    )


def spread(ratios: list[float]) -> str:
    """`median [min, max]` of per-repeat ratios, two decimals: how every benchmark table prints a ratio."""
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"


def _call(name: str, fn: Callable[[], object], setup: Callable[[str], object] | None) -> Timing:
    if setup is not None:
        setup(name)
    cpu, wall = time.process_time(), time.perf_counter()
    own = fn()
    whole = Timing(cpu_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall)
    return own if isinstance(own, Timing) else whole


def _paired(measurement: Measurement, name: str, key: str) -> list[float]:
    _check_name("name", name, measurement.variants)
    base = measurement.variants[measurement.baseline]
    mine = measurement.variants[name]
    return [
        getattr(a, key) / getattr(b, key) if getattr(b, key) > 0 else math.nan for a, b in zip(mine, base, strict=True)
    ]


def _check_name(argument: str, name: str, variants: dict) -> None:
    if name not in variants:
        raise ValueError(f"{argument}={name!r} is not one of the variants: {', '.join(map(repr, variants))}")


def _check_count(argument: str, value: int, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{argument} must be an int >= {least}, got {value!r}")


def _torch_threads() -> int | None:
    """torch's intra-op thread count if torch is loaded (importing it here would cost seconds for a CPU-only use)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None
