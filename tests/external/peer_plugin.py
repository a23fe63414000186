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

In `limit` mode the tests in `SKIPS` are skipped by name, each with its reason.
"""

from __future__ import annotations

import functools
import os

import pytest

MODE = os.environ.get("CACHELIMIT_PEER_MODE", "unpatched")
LIMIT = int(os.environ.get("CACHELIMIT_PEER_LIMIT", "4096"))
_ASSISTED = ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit")

#: test name (the method, any model file) -> why it cannot pass with a default cache_limit
_RING_STORAGE = (
    "checks each cache layer's raw key/value tensors against [batch, heads, positions, head_dim]; a BoundedCache "
    "layer's tensors are its ring, grown geometrically (up to twice the positions it holds, in slot order), so "
    "they are larger; the positions it holds are `get_seq_length()` / `kept_lengths()`, checked exactly by "
    "cachelimit's tests/test_growth.py"
)
SKIPS: dict[str, str] = {
    "test_generate_compile_model_forward_fullgraph": (
        "compiles the forward with fullgraph=True around a DynamicCache by default; a BoundedCache plans every step "
        "in Python (data-dependent slots and masks) and is not meant to be compiled"
    ),
    "test_greedy_generate_dict_outputs_use_cache": _RING_STORAGE,
    "test_beam_search_generate_dict_outputs_use_cache": _RING_STORAGE,
    "test_assisted_decoding_matches_greedy_search": _RING_STORAGE + " (of its greedy run)",
}


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
        if not _chooses_its_cache(self, generation_config, kwargs):
            kwargs["cache_limit"] = LIMIT
        return generate(self, inputs, generation_config, *args, **kwargs)

    wrapper.__wrapped_by_peer_plugin__ = True
    return wrapper


def pytest_configure(config) -> None:
    if MODE == "unpatched":
        return
    if MODE not in ("patched", "limit"):
        raise pytest.UsageError(f"CACHELIMIT_PEER_MODE must be unpatched, patched or limit, got {MODE!r}")
    import cachelimit
    from cachelimit.families.table import FAMILIES

    cachelimit.patch()
    if MODE == "limit":
        for family in FAMILIES.values():
            for cls in family.model_classes:
                cls.generate = _with_default_limit(cls.__dict__["generate"])


def skip_reason(name: str) -> str | None:
    """The reason `name` is skipped: a name in SKIPS, or one of its `parameterized.expand` variants (`_0_...`)."""
    for skipped, reason in SKIPS.items():
        suffix = name[len(skipped) :]
        if name.startswith(skipped) and (not suffix or (suffix[0] == "_" and suffix[1:2].isdigit())):
            return reason
    return None


def pytest_collection_modifyitems(config, items) -> None:
    if MODE != "limit":
        return
    for item in items:
        reason = skip_reason(getattr(item, "originalname", None) or item.name.split("[")[0])
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cachelimit peer suite, cache_limit={LIMIT}: {reason}"))


def pytest_report_header(config) -> str:
    return f"cachelimit peer suite: mode {MODE}" + (f", default cache_limit={LIMIT}" if MODE == "limit" else "")
