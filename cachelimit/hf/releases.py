"""Which transformers releases cachelimit supports, and how code asks for one (`at_least`, `require`).

Apart from `compat` (the differences between those releases) so that the one place that knows the supported range
is short; `compat` re-exports these, so code that bridges a difference imports one module.
"""

from __future__ import annotations

import warnings

import transformers
from packaging.specifiers import SpecifierSet
from packaging.version import Version

#: The releases cachelimit is tested on (the legs of `.ci/run`); pyproject.toml declares the same.
OLDEST_SUPPORTED = "4.57.6"
FIRST_UNSUPPORTED = "5.25"
#: Release series inside that span that are left out, each for a bug of its own generate (measured: docs/contributing/versions.md
#: "Versions and compatibility"): 5.0.0 refuses `prefill_chunk_size` unless the caller made the cache; 5.2.0's
#: chunked prefill gives every chunk the prompt's last positions (5.3.0 slices them); 5.1.x, between the two,
#: was not measured.
EXCLUDED_SERIES = ("5.0", "5.1", "5.2")
SUPPORTED_RANGE = ",".join(
    [f">={OLDEST_SUPPORTED}", *(f"!={series}.*" for series in EXCLUDED_SERIES), f"<{FIRST_UNSUPPORTED}"]
)

#: The transformers this process runs (its release, without local or dev suffixes).
TRANSFORMERS = Version(Version(transformers.__version__).base_version)


def at_least(release: str) -> bool:
    """Whether the installed transformers is `release` or newer."""
    return release_at_least(TRANSFORMERS, release)


def release_at_least(installed: Version, release: str) -> bool:
    return installed >= Version(release)


def is_supported(installed: Version = TRANSFORMERS) -> bool:
    return SpecifierSet(SUPPORTED_RANGE).contains(installed)


def check_supported(installed: Version = TRANSFORMERS) -> None:
    """Warn (not fail) when transformers is outside the tested range; see docs/contributing/versions.md for why."""
    if not is_supported(installed):
        warnings.warn(
            f"cachelimit is tested with transformers {SUPPORTED_RANGE}, but transformers {installed} is installed; "
            f"bounded generation may fail or differ. Install a supported release "
            f'(pip install "transformers{SUPPORTED_RANGE}") or check this one with `python tools/leg.py {installed}`.',
            UserWarning,
            stacklevel=2,
        )


def require(feature: str, release: str) -> None:
    """Refuse (ValueError, before any token) a feature the installed transformers lacks, naming the release
    that brought it."""
    if not at_least(release):
        raise ValueError(
            f"{feature} needs transformers >= {release}, but transformers {TRANSFORMERS} is installed "
            f'(pip install "transformers{SUPPORTED_RANGE},>={release}").'
        )
