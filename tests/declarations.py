"""The family test declarations (`tests/models/test_<family>.py`), found by discovery, never listed by hand.

Each declaration is one `unittest.TestCase` naming its `family` and mixing in the shared suites; what it mixes in
says how the family is verified (`tests/test_families.py` checks every registered family has one, and the families
table of docs/models.md against both).
"""

from __future__ import annotations

import importlib
import pkgutil
import unittest
from functools import cache

import tests.models
from cachelimit.families.registry import LEARNED, NONE, ROPE, SINUSOIDAL
from cachelimit.families.table import SERVED_TYPES
from tests.bounded_mixin import BoundedGenerationTesterMixin
from tests.chunked_mixin import ChunkedOracleMixin
from tests.common import ATTENTION
from tests.family_mixin import NativeWindowOracleMixin
from tests.hybrid_mixin import HybridOracleMixin, KVSharingOracleMixin
from tests.recurrent_mixin import RecurrentOracleMixin
from tests.sink_mixin import NativeWindowSinkTesterMixin


@cache
def declared_tests() -> dict[str, type[unittest.TestCase]]:
    """family name -> its test class, from every module of `tests.models`."""
    found: dict[str, type[unittest.TestCase]] = {}
    for info in sorted(pkgutil.iter_modules(tests.models.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"tests.models.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, unittest.TestCase) and hasattr(value, "family"):
                if value.family in found:
                    raise AssertionError(f"two test declarations for family {value.family!r}")
                found[value.family] = value
    return found


def representative_families() -> list[str]:
    """Families that run the full matrix (beams, sampling, bf16, continuation, scores, ...)."""
    return [name for name, test in declared_tests().items() if issubclass(test, BoundedGenerationTesterMixin)]


def has_native_window_oracle(family: str) -> bool:
    test = declared_tests()[family]
    return issubclass(test, NativeWindowOracleMixin | NativeWindowSinkTesterMixin)


#: the layer-kind oracles a declaration mixes in, as the table names them
EXTRA_ORACLES = {
    KVSharingOracleMixin: "KV sharing (own run, banded, sinks)",
    RecurrentOracleMixin: "recurrent state (transformers' own, bytes flat, beams)",
    ChunkedOracleMixin: "chunked (own run, banded per chunk, sinks, NoPE temperature)",
}


def _positions(name: str) -> str:
    from transformers import CONFIG_MAPPING

    family = SERVED_TYPES[name]
    if family.positions == LEARNED:
        return "learned absolute"
    if family.positions == SINUSOIDAL:
        return "sinusoidal absolute"
    if family.positions == NONE:
        return "none in attention (order from the recurrent layers)"
    config = CONFIG_MAPPING[name]()
    rope = getattr(config, "rope_parameters", None) or {}
    parts = ["RoPE"]
    if any(isinstance(value, dict) for value in rope.values()):
        parts.append("one base per layer type")
    factors = [rope.get("partial_rotary_factor", 1.0)] + [
        value.get("partial_rotary_factor", 1.0) for value in rope.values() if isinstance(value, dict)
    ]
    if min(factors) < 1.0:
        parts.append("partial rotary")
    if getattr(config, "no_rope_layers", None) is not None:
        parts.append("NoPE layers")
    return ", ".join(parts)


def verified_against(name: str) -> list[str]:
    """The oracles a served model type is checked against, read from its test declaration (an alias without one of
    its own, whose config is its family's, is its family's run)."""
    family = SERVED_TYPES[name]
    test = declared_tests().get(name) or declared_tests()[family.name]
    oracles = ["banded reference", "StreamingLLM reference" if family.positions == ROPE else "banded + sinks"]
    if test.sink_refusal:
        oracles[1] = "sinks refused before any token"
    if issubclass(test, NativeWindowOracleMixin | NativeWindowSinkTesterMixin):
        oracles.append("native window")
    if issubclass(test, HybridOracleMixin):
        oracles.append("hybrid (own run, banded per layer type)")
    for mixin, oracle in EXTRA_ORACLES.items():
        if issubclass(test, mixin):
            oracles.append(oracle)
    if issubclass(test, BoundedGenerationTesterMixin):
        oracles.append("full matrix")
    return oracles


def supported_families_table() -> str:
    """The families table of docs/models.md, from the registry and the test declarations."""
    rows = [
        "| family (`model_type`) | class | positions | native window | sinks | verified against | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, test in sorted(declared_tests().items()):
        family = SERVED_TYPES[name]
        window = "yes (every layer sliding)" if has_native_window_oracle(name) else "no"
        if issubclass(test, HybridOracleMixin):
            window = "yes: every layer, or per layer (hybrid)"
        sinks = "re-rotated with the model's rotary" if family.positions == ROPE else "keep their positions"
        if family.positions == NONE:
            sinks = "keep their keys as written"
        if test.sink_refusal:
            sinks = f"refused: {test.sink_refusal}"
        oracles = verified_against(name)
        notes = [test.notes] if test.notes else []
        if test.attention != ATTENTION:
            notes.append(f"{' and '.join(test.attention)} attention only (transformers)")
        classes = ", ".join(f"`{cls}`" for cls in family.class_names)
        if name != family.name:
            classes += f" (as `{family.name}`)"
        cells = [f"`{name}`", classes, _positions(name), window, sinks, ", ".join(oracles), "; ".join(notes)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
