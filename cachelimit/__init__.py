"""cachelimit: bound the KV cache of Hugging Face transformers text generation.

import cachelimit
cachelimit.patch()                       # or cachelimit.patch("gpt2", "llama", "mistral")
model.generate(ids, max_new_tokens=20_000, cache_limit=1024, num_sink_tokens=4)
model.set_cache_implementation("sink", window_length=1025, num_sink_tokens=4)  # the same, for every generate
"""

from __future__ import annotations

from .compat import SUPPORTED_RANGE, check_supported

check_supported()  # first: on an untested transformers, say so before anything below can fail

from . import models  # noqa: E402, F401  (registers the supported families)
from .patches import FAMILIES, is_patched, patch, unpatch  # noqa: E402
from .policy import WindowPolicy  # noqa: E402
from .registry import CACHE_IMPLEMENTATIONS, GenerateArguments, register_cache_implementation  # noqa: E402
from .window_cache import BoundedCache, BoundedLayer  # noqa: E402

__version__ = "0.1.0"


def supported_families() -> list[str]:
    """Names accepted by `patch` and `unpatch`."""
    return sorted(FAMILIES)


__all__ = [
    "CACHE_IMPLEMENTATIONS",
    "BoundedCache",
    "BoundedLayer",
    "GenerateArguments",
    "SUPPORTED_RANGE",
    "WindowPolicy",
    "__version__",
    "is_patched",
    "patch",
    "register_cache_implementation",
    "supported_families",
    "unpatch",
]
