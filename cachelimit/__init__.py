"""cachelimit: bound the KV cache of Hugging Face transformers text generation.

import cachelimit
cachelimit.patch()                       # or cachelimit.patch("qwen3", "llama"); families are config.model_type
model.generate(ids, max_new_tokens=20_000, cache_limit=1024, num_sink_tokens=4)
model.set_cache_implementation("sink", window_length=1025, num_sink_tokens=4)  # the same, for every generate
with cachelimit.patched("qwen3"): ...     # patched inside the block only
"""

from __future__ import annotations

from .family import FAMILIES, Family
from .patches import is_patched, patch, patched, unpatch
from .policy import WindowPolicy
from .registry import CACHE_IMPLEMENTATIONS, GenerateArguments, register_cache_implementation
from .window_cache import BoundedCache, BoundedLayer

__version__ = "0.1.0"


def supported_families() -> list[str]:
    """Names accepted by `patch` and `unpatch`: the `model_type` of every registered family."""
    return sorted(FAMILIES)


__all__ = [
    "CACHE_IMPLEMENTATIONS",
    "FAMILIES",
    "BoundedCache",
    "BoundedLayer",
    "Family",
    "GenerateArguments",
    "WindowPolicy",
    "__version__",
    "is_patched",
    "patch",
    "patched",
    "register_cache_implementation",
    "supported_families",
    "unpatch",
]
