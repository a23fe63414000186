"""pytest plugin that runs transformers' own model test suites against cachelimit (see README.md here).

Loaded with `-p peer_plugin` by `run_peer_suite.py`; the mode comes from `CACHELIMIT_PEER_MODE`:

- `unpatched`: nothing changes (the baseline);
- `patched`: `cachelimit.patch()` on every supported family; no call asks for a limit, so every outcome must
  equal the baseline's;
- `limit`: patched, and every `generate` of a patched model that does not choose its cache itself defaults to
  `cache_limit=CACHELIMIT_PEER_LIMIT` (4096: longer than any test's sequence, so the bound never cuts and the
  results must equal transformers' own). Calls that choose their cache (`past_key_values`, `cache_implementation`,
  `use_cache=False`, assisted decoding, an attention implementation cachelimit refuses) keep it: those
  combinations are documented refusals, tested in cachelimit's own suite.

In `limit` mode the tests in `peer_reasons.SKIPS` are skipped by name, each with its reason; in every mode the
tests in `peer_reasons.BASELINE` (the suite's own failures on the installed release) and `peer_reasons.VACUOUS`
(tests that would pass without running) are strict expected failures. A test method that returns a value fails:
unittest only warns, and such a "pass" has checked nothing.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from peer_reasons import BASELINE, SKIPS, VACUOUS, match

MODE = os.environ.get("CACHELIMIT_PEER_MODE", "unpatched")
LIMIT = int(os.environ.get("CACHELIMIT_PEER_LIMIT", "4096"))
#: what unittest warns when a test method returns a value (its body may never have run); made an error below
RETURNS_A_VALUE = "It is deprecated to return a value that is not None from a test case"
_ASSISTED = ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit")
#: limit mode: model_type -> [generate calls given the default limit, calls that chose their cache]; written to
#: `$CACHELIMIT_PEER_CALLS/<worker>.json` at the end, so that the runner can tell a limit run that bounded nothing
CALLS: dict[str, list[int]] = {}


def _chooses_its_cache(model, generation_config, kwargs) -> bool:
    """Whether the call (or the model) already decides the cache, so that a default limit would only be refused."""
    if any(kwargs.get(name) is not None for name in ("cache_limit", "num_sink_tokens", "past_key_values")):
        return True
    if getattr(model, "_cachelimit_setting", None) is not None:
        return True
    if model.config._attn_implementation not in ("eager", "sdpa"):
        return True
    configs = [kwargs, *(vars(config) for config in (generation_config, model.generation_config) if config)]
    for fields in configs:
        if fields.get("use_cache") is False or fields.get("cache_implementation") is not None:
            return True
        if fields.get("is_assistant") or any(fields.get(name) for name in _ASSISTED):
            return True
    return False


def _with_default_limit(generate):
    @functools.wraps(generate)
    def wrapper(self, inputs=None, generation_config=None, *args, **kwargs):
        chooses = _chooses_its_cache(self, generation_config, kwargs)
        if not chooses:
            kwargs["cache_limit"] = LIMIT
        CALLS.setdefault(self.config.model_type, [0, 0])[chooses] += 1
        return generate(self, inputs, generation_config, *args, **kwargs)

    wrapper.__wrapped_by_peer_plugin__ = True
    return wrapper


def pytest_configure(config) -> None:
    config.addinivalue_line("filterwarnings", f"error:{RETURNS_A_VALUE}:DeprecationWarning")
    if MODE == "unpatched":
        return
    if MODE not in ("patched", "limit"):
        raise pytest.UsageError(f"CACHELIMIT_PEER_MODE must be unpatched, patched or limit, got {MODE!r}")
    import cachelimit

    cachelimit.patch()
    if MODE == "limit":
        for family in cachelimit.FAMILIES.values():
            for cls in family.model_classes if family.available else ():  # patch() left out what this release lacks
                cls.generate = _with_default_limit(cls.__dict__["generate"])


def skip_reason(name: str) -> str | None:
    """Why `name` is skipped in `limit` mode (`SKIPS`, parameterized variants included), or None."""
    return match(name, SKIPS)


def baseline_reason(family: str, name: str) -> str | None:
    """Why `name` in `family`'s file fails unpatched (`BASELINE`), or None."""
    return match(name, BASELINE.get(family, {}))


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        qualified = f"{item.cls.__name__}::{name}" if getattr(item, "cls", None) else name  # one class's failure
        reason = baseline_reason(item.path.parent.name, qualified) or baseline_reason(item.path.parent.name, name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"cachelimit peer suite, baseline: {reason}"))
        if name in VACUOUS:
            reason = f"cachelimit peer suite, checks nothing on this release: {VACUOUS[name]}"
            item.add_marker(pytest.mark.xfail(strict=True, raises=DeprecationWarning, reason=reason))
        reason = skip_reason(name) if MODE == "limit" else None
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cachelimit peer suite, cache_limit={LIMIT}: {reason}"))


def pytest_sessionfinish(session) -> None:
    folder = os.environ.get("CACHELIMIT_PEER_CALLS")
    if folder and CALLS:
        Path(folder, f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json").write_text(json.dumps(CALLS))


def pytest_report_header(config) -> str:
    return f"cachelimit peer suite: mode {MODE}" + (f", default cache_limit={LIMIT}" if MODE == "limit" else "")
