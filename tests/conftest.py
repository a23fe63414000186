"""One torch thread per pytest-xdist worker: the workers already use every core (`-n auto`), and more threads
than cores only make each of them wait.

transformers 5.24.0 renamed `past_key_values` to `cache`. Passing the old name raises a FutureWarning, which
pyproject.toml's filterwarnings turns into an error; reading `output.past_key_values` only logs a notice
(`logger.warning_once` in transformers/utils/generic.py), which no warnings filter sees. `CacheNameNotice` makes that
notice a FutureWarning with the same text, so the same filter fails any test that reads the old name (on every read:
the `warning_once` memory is cleared before each test), and nothing cachelimit ships or tests may use it.

Tests marked `slow` (minutes of installing into a fresh virtualenv) are skipped unless `CACHELIMIT_SLOW_TESTS=1`;
`.ci/run` runs them once, on the main leg.
"""

from __future__ import annotations

import logging
import os
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


def pytest_collection_modifyitems(config, items):
    """Skip the `slow` tests unless CACHELIMIT_SLOW_TESTS=1: minutes of virtualenv installs, or processes that must
    not share the CPU with the suite's workers (torchrun's ranks); `.ci/run` runs them in a pytest of their own."""
    if os.environ.get(SLOW_TESTS) == "1":
        return
    skip = pytest.mark.skip(reason=f"slow (run on its own): run with {SLOW_TESTS}=1, as .ci/run does")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
