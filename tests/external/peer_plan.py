"""Which of transformers' model files the external test bed runs, and in which modes: the runner's plan.

No hand-written family list: the files are those of every family cachelimit serves (`cachelimit.supported_families()`,
the registry) that the suite has a `tests/models/<family>/test_modeling_<family>.py` for, so a family served
tomorrow is run tomorrow. A served family without a file, or whose file is set aside in `peer_reasons.FILES`,
is printed as such, never dropped silently.

The rotation (with `batches`) keeps CI's time bounded as families are added: `unpatched` and `patched`
(condition (a), which needs both) run on `size` consecutive files of the sorted list, starting at `day * size`
(wrapping), where `day` is the UTC date as days since 1970-01-01, `limit` (the bounded path, a bound that never
cuts) on every file or, once there are too many for CI's budget, on its own, larger rotation, and `limit-cut` (a
bound that cuts every prompt) on a third one of its own. Consecutive days take adjacent windows, so every file is
run within ceil(files / size) days, and one day's choice is the same on every machine (`--day` reproduces
another's).
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("unpatched", "patched", "limit", "limit-cut")
#: mode -> the `cache_limit` every `generate` that does not choose its cache gets (the runner passes it to the plugin
#: as `$CACHELIMIT_PEER_LIMIT`; `--cut-limit` changes limit-cut's). `limit`: longer than any test's sequence (the
#: testers' prompts are 7 to 96 tokens, a few dozen new ones at most; a call that grows past it fails the run), so the
#: bound never cuts and every result must be transformers' own. `limit-cut`: shorter than every tester's prompt (7
#: tokens, the text testers' `seq_length`, the shortest), so every call is cut in the prefill already and again at
#: each new token: what must then hold is that two generation paths of the same bounded model agree.
DEFAULT_LIMITS = {"limit": 4096, "limit-cut": 4}
REPO = Path(__file__).resolve().parents[2]


def served_families() -> list[str]:
    """The registry's families, from this checkout's cachelimit (the one the suite's runs import)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import cachelimit

    return cachelimit.supported_families()


def suite_name(family: str) -> str:
    """The suite's folder for `family`: its model type, or for the text decoder of a multimodal model
    (`gemma4_text`, `qwen3_5_text`, `llama4_text`, ...) the multimodal model's, whose file tests both."""
    return family.removesuffix("_text")


def suite_file(family: str) -> str:
    """The suite's file for `family`, relative to the suite's root."""
    name = suite_name(family)
    return f"tests/models/{name}/test_modeling_{name}.py"


@dataclass
class Discovery:
    """The served families split by what the suite holds for them."""

    #: served, with a file, run (sorted)
    runnable: list[str]
    #: served, no file in the suite
    missing: list[str]
    #: served, with a file that is not run -> why (peer_reasons.FILES)
    set_aside: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """What is not run, for the runner's output: the families without a file, then each file set aside."""
        missing = ", ".join(self.missing)
        out = [f"served, no {suite_file('<family>')} in the suite, not run: {missing}"] if missing else []
        out += [f"served, file not run: {name}: {reason}" for name, reason in self.set_aside.items()]
        return out


def discover(suite: Path, served: Iterable[str], set_aside: dict[str, str]) -> Discovery:
    """Split `served` into families whose file in `suite` is run, those without a file, and those set aside."""
    runnable, missing, aside = [], [], {}
    for family in sorted(served):
        if not (suite / suite_file(family)).is_file():
            missing.append(family)
        elif family in set_aside:
            aside[family] = set_aside[family]
        else:
            runnable.append(family)
    return Discovery(runnable, missing, aside)


def utc_day(now: datetime.datetime | None = None) -> int:
    """Days since 1970-01-01 in UTC: the rotation's default position."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return (now.astimezone(datetime.timezone.utc).date() - datetime.date(1970, 1, 1)).days


def rotation(families: list[str], size: int, day: int) -> list[str]:
    """`size` consecutive families of the sorted list, starting at `day * size`, wrapping (all if fewer)."""
    ordered = sorted(families)
    if size >= len(ordered):
        return ordered
    return sorted(ordered[(day * size + index) % len(ordered)] for index in range(size))


def plan(
    families: list[str],
    modes: Iterable[str],
    rotate: int | None,
    day: int,
    rotate_limit: int | None = None,
    rotate_cut: int | None = None,
) -> list[tuple[str, str]]:
    """(family, mode) runs in order: every mode on every family, or, with `rotate`, `unpatched`/`patched` only on
    that day's rotation of `rotate` files, with `rotate_limit`, `limit` only on its rotation of that many, and with
    `rotate_cut`, `limit-cut` only on its rotation of that many."""
    modes = [mode for mode in MODES if mode in set(modes)]
    sizes = {"unpatched": rotate, "patched": rotate, "limit": rotate_limit, "limit-cut": rotate_cut}
    chosen = {mode: set(families if sizes[mode] is None else rotation(families, sizes[mode], day)) for mode in modes}
    return [(family, mode) for family in families for mode in modes if family in chosen[mode]]


def batches(runs: list[tuple[str, str]], batch: bool) -> list[tuple[str, list[str]]]:
    """(mode, families) per pytest run: one per file and mode, or with `batch` one per mode over all its files, so
    that the workers start and import torch and transformers once per mode, not once per file (most of a small
    file's time)."""
    if not batch:
        return [(mode, [family]) for family, mode in runs]
    modes = [mode for mode in MODES if any(m == mode for _, m in runs)]
    return [(mode, [family for family, m in runs if m == mode]) for mode in modes]
