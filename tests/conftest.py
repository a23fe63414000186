"""One torch thread per pytest-xdist worker: the workers already use every core (`-n auto`), and more threads
than cores only make each of them wait.

transformers 5.24.0 renamed `past_key_values` to `cache`. Passing the old name raises a FutureWarning, which
pyproject.toml's filterwarnings turns into an error; reading `output.past_key_values` only logs a notice
(`logger.warning_once` in transformers/utils/generic.py), which no warnings filter sees. `CacheNameNotice` makes that
notice a FutureWarning with the same text, so the same filter fails any test that reads the old name (on every read:
the `warning_once` memory is cleared before each test), and nothing cachelimit ships or tests may use it.

Tests marked `slow` (minutes of installing into a fresh virtualenv) are skipped unless `CACHELIMIT_SLOW_TESTS=1`;
`.ci/run` runs them once, on the main leg.

CI's older transformers legs run a share of the per-family tests each (`CACHELIMIT_FAMILY_SHARE=k/n`: the classes
of every n-th served family from the k-th, in the registry's sorted order; `.ci/run` gives its three older legs the
three shares of the UTC day, turning by one each day), so that every family runs on the newest release and on one
older one every day, and on each older one every third day, within CI's time. The per-family tests are those of
`tests/models/` and of the modules that declare one class per served family (`ONE_CLASS_PER_FAMILY = True`). The
README's test command sets no share: it runs every family.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import warnings

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

#: the start of the notice transformers logs when code reads or passes a cache under its pre-5.24 name
CACHE_NAME_NOTICE = "`past_key_values`/`cache_params` are deprecated"
#: the module whose logger logs it (transformers/utils/generic.py, `ModelOutput.past_key_values` and kwargs renaming)
NOTICE_LOGGER = "transformers.utils.generic"


class CacheNameNotice(logging.Filter):
    """Re-raises transformers' logged cache-name notice as a FutureWarning (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(CACHE_NAME_NOTICE):
            warnings.warn(message, FutureWarning, stacklevel=2)
        return True


_notice_logger = logging.getLogger(NOTICE_LOGGER)
_notice_logger.addFilter(CacheNameNotice())
# its own level: the command line run in-process quiets transformers' loggers (`set_verbosity_error`), which would
# drop the notice before any filter saw it
_notice_logger.setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _every_cache_name_notice():
    """`warning_once` logs a message once per process: forget it before each test, so every test that reads the old
    name is caught, not only the first one in a worker."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.warning_once.cache_clear()
    yield


#: set to 1 to run the tests marked `slow` (pyproject.toml); `.ci/run` does, in a pytest of their own
SLOW_TESTS = "CACHELIMIT_SLOW_TESTS"


#: "k/n": run the per-family tests of every n-th served family from the k-th only (see the module docstring); unset,
#: empty or "all": every family
FAMILY_SHARE = "CACHELIMIT_FAMILY_SHARE"


def family_share() -> tuple[int, int, list[str]] | None:
    """(k, n, the families of share k of n), from `$CACHELIMIT_FAMILY_SHARE`, or None when it is not set."""
    value = os.environ.get(FAMILY_SHARE)
    if not value or value == "all":
        return None
    found = re.fullmatch(r"(\d+)/(\d+)", value)
    if not found or not int(found[1]) < int(found[2]):
        raise pytest.UsageError(f"{FAMILY_SHARE} must be k/n with 0 <= k < n, got {value!r}")
    import cachelimit

    share, shares = int(found[1]), int(found[2])
    return share, shares, sorted(cachelimit.supported_families())[share::shares]


def per_family(item) -> str | None:
    """The family a per-family test class checks (tests/models/, or a module with `ONE_CLASS_PER_FAMILY`), or None."""
    family = getattr(getattr(item, "cls", None), "family", None)
    module = getattr(item, "module", None)
    if family is None or not (item.path.parent.name == "models" or getattr(module, "ONE_CLASS_PER_FAMILY", False)):
        return None
    return served_family(family)


def served_family(name: str) -> str:
    """The registry family `name` is (an alias, `exaone` for one, has its own test class: it goes with its family)."""
    return _family_of_alias().get(name, name)


@functools.cache
def _family_of_alias() -> dict[str, str]:
    import cachelimit

    return {alias: family.name for family in cachelimit.FAMILIES.values() for alias in family.aliases}


def pytest_report_header(config) -> str | None:
    found = family_share()
    if found is None:
        return None
    share, shares, families = found
    return f"{FAMILY_SHARE}={share}/{shares}: the per-family tests of {len(families)} families: {', '.join(families)}"


def pytest_collection_modifyitems(config, items):
    """Keep the per-family tests of `$CACHELIMIT_FAMILY_SHARE`'s families only, where it is set. Skip the `slow`
    tests unless CACHELIMIT_SLOW_TESTS=1: minutes of virtualenv installs, or processes that must not share the CPU
    with the suite's workers (torchrun's ranks); `.ci/run` runs them in a pytest of their own."""
    found = family_share()
    if found is not None:
        chosen = {None, *found[2]}  # None: not a per-family test, always kept
        kept, left_out = [], []
        for item in items:
            (kept if per_family(item) in chosen else left_out).append(item)
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    if os.environ.get(SLOW_TESTS) == "1":
        return
    skip = pytest.mark.skip(reason=f"slow (run on its own): run with {SLOW_TESTS}=1, as .ci/run does")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
