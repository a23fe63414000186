"""pytest plugin that runs transformers' own model test suites against cachelimit (see README.md here).

Loaded with `-p peer_plugin` by `run_peer_suite.py`; the mode comes from `CACHELIMIT_PEER_MODE`:

- `unpatched`: nothing changes (the baseline);
- `patched`: `cachelimit.patch()` on every supported family; no call asks for a limit, so every outcome must
  equal the baseline's;
- `limit`: patched, and every `generate` of a patched model that does not choose its cache itself defaults to
  `cache_limit=CACHELIMIT_PEER_LIMIT` (4096: longer than any test's sequence, so the bound never cuts and the
  results must equal transformers' own). Calls that choose their cache (`past_key_values`, `cache_implementation`,
  `use_cache=False`, assisted decoding, an attention implementation cachelimit refuses) keep it: those
  combinations are documented refusals, tested in cachelimit's own suite;
- `limit-cut`: the same with a limit that cuts every prompt (4, `peer_plan.DEFAULT_LIMITS`): the results are no
  longer transformers' own, but two generation paths of the bounded model (`peer_reasons.CROSS_PATH`) must agree.
  Only the generation tests run (`generation_test`; `CACHELIMIT_PEER_CUT_TESTS=all` runs every test): a test
  that never calls `generate` has the outcome it has in `limit`, where it already ran.

In both bounded modes the tests in `peer_reasons.SKIPS` are skipped by name, each with its reason, and in
`limit-cut` the tests in `peer_reasons.CUT` too (a cutting bound changes what they compare by design); in every
mode the tests in `peer_reasons.BASELINE` (the suite's own failures on the installed release) and
`peer_reasons.VACUOUS` (tests that would pass without running) are strict expected failures. A test method that
returns a value fails: unittest only warns, and such a "pass" has checked nothing.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
import torch
from peer_plan import DEFAULT_LIMITS, MODES, suite_name
from peer_reasons import BASELINE, CROSS_PATH, CUT, SKIPS, VACUOUS, match

MODE = os.environ.get("CACHELIMIT_PEER_MODE", "unpatched")
LIMIT = int(os.environ.get("CACHELIMIT_PEER_LIMIT", DEFAULT_LIMITS.get(MODE, DEFAULT_LIMITS["limit"])))
#: what unittest warns when a test method returns a value (its body may never have run); made an error below
RETURNS_A_VALUE = "It is deprecated to return a value that is not None from a test case"
_ASSISTED = ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit")
#: bounded modes: model_type -> [generate calls given the default limit, calls that chose their cache, calls given
#: the default limit whose sequence grew past it (the bound cut)]; written to `$CACHELIMIT_PEER_CALLS/<worker>.json`
#: at the end, so that the runner can tell a run that bounded nothing, or a `limit-cut` run that cut nothing
CALLS: dict[str, list[int]] = {}


def _chooses_its_cache(model, generation_config, kwargs) -> bool:
    """Whether the call (or the model) already decides the cache, so that a default limit would only be refused."""
    chosen = ("cache_limit", "num_sink_tokens", "cache_policy", "past_key_values", "cache")  # the cache: either name
    if any(kwargs.get(name) is not None for name in chosen):
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


def sequence_length(inputs, kwargs, output) -> int:
    """The longest sequence a call held: its prompt (ids or embeddings, however passed) or what it returned (ids,
    which leave out a prompt given as embeddings only, hence both)."""
    lengths = [0]
    for given in (inputs, kwargs.get("input_ids"), kwargs.get("inputs_embeds")):
        if isinstance(given, torch.Tensor) and given.dim() >= 2:
            lengths.append(given.shape[1])
    sequences = getattr(output, "sequences", output)
    if isinstance(sequences, torch.Tensor) and sequences.dim() == 2:
        embeds = kwargs.get("inputs_embeds")
        only_embeds = inputs is None and kwargs.get("input_ids") is None and isinstance(embeds, torch.Tensor)
        lengths.append(sequences.shape[1] + (embeds.shape[1] if only_embeds else 0))
    return max(lengths)


def _with_default_limit(generate):
    @functools.wraps(generate)
    def wrapper(self, inputs=None, generation_config=None, *args, **kwargs):
        chooses = _chooses_its_cache(self, generation_config, kwargs)
        if not chooses:
            kwargs["cache_limit"] = LIMIT
        counts = CALLS.setdefault(self.config.model_type, [0, 0, 0])
        counts[chooses] += 1
        output = generate(self, inputs, generation_config, *args, **kwargs)
        counts[2] += not chooses and sequence_length(inputs, kwargs, output) > LIMIT
        return output

    wrapper.__wrapped_by_peer_plugin__ = True
    return wrapper


def pytest_configure(config) -> None:
    config.addinivalue_line("filterwarnings", f"error:{RETURNS_A_VALUE}:DeprecationWarning")
    if MODE == "unpatched":
        return
    if MODE not in MODES:
        raise pytest.UsageError(f"CACHELIMIT_PEER_MODE must be one of {', '.join(MODES)}, got {MODE!r}")
    import cachelimit

    cachelimit.patch()
    if MODE in DEFAULT_LIMITS:
        for family in cachelimit.FAMILIES.values():
            for cls in family.model_classes if family.available else ():  # patch() left out what this release lacks
                cls.generate = _with_default_limit(cls.__dict__["generate"])


def skip_reason(name: str, mode: str = "limit") -> str | None:
    """Why `name` is skipped in `mode` (`SKIPS` in the bounded modes, parameterized variants included), or None."""
    return match(name, SKIPS) if mode in DEFAULT_LIMITS else None


def cut_reason(name: str, mode: str = "limit-cut") -> str | None:
    """Why `name` is skipped in `mode` (`CUT`, in `limit-cut` only: a cutting bound changes it), or None."""
    return match(name, CUT) if mode == "limit-cut" else None


def cross_path(name: str) -> str | None:
    """What two generation paths test `name` compares (`CROSS_PATH`, exact names: required to pass), or None."""
    return CROSS_PATH.get(name)


def baseline_reason(family: str, name: str) -> str | None:
    """Why `name` in `family`'s file fails unpatched (`BASELINE`), or None."""
    return match(name, BASELINE.get(family, {}))


def generation_test(item) -> bool:
    """Whether a collected test is one of the suite's generation tests: marked `generate` by the suite, named
    after it (the mixin leaves a few that call `generate` unmarked, `test_generate_with_and_without_position_ids`
    among them), or a cross-path test."""
    name = item.name.split("[")[0]
    return item.get_closest_marker("generate") is not None or "generate" in name or cross_path(name) is not None


@functools.cache
def served() -> tuple[frozenset[str], frozenset[type]]:
    """The suite folders of the served families and the model classes cachelimit patches on the installed release:
    read in every mode, `unpatched` included, without patching, so that every mode deselects the same tests."""
    import cachelimit

    families = [family for family in cachelimit.FAMILIES.values() if family.available]
    folders = frozenset(suite_name(name) for name in cachelimit.supported_families())
    return folders, frozenset(cls for family in families for cls in family.model_classes)


def tests_no_served_class(item) -> bool:
    """Whether `item` belongs to a test class whose `all_model_classes` are set on the class and hold none of the
    classes cachelimit patches, in a served family's file: a multimodal file's image- or audio-to-text class
    (`Gemma4Vision2TextModelTest`, `Qwen3_5ModelTest`), whose `...ForConditionalGeneration` cachelimit does not
    patch (it serves the text decoder's `...ForCausalLM`, tested by the file's text class). Such a class checks
    nothing of cachelimit in any mode and is most of the file's time (CI's `unpatched` batch of falcon_h1, gemma2 and
    gemma4_text: 19.2 CPU minutes with them, 5.7 without, 2026-12-02).
    A class that sets its classes in `setUp` (`CausalLMModelTest`, from its tester) is kept."""
    classes = getattr(getattr(item, "cls", None), "all_model_classes", None)
    if not isinstance(classes, tuple) or not classes:
        return False
    folders, patched = served()
    return item.path.parent.name in folders and not set(classes) & patched


def pytest_collection_modifyitems(config, items) -> None:
    unserved = {id(item) for item in items if tests_no_served_class(item)}
    if unserved:
        config.hook.pytest_deselected(items=[item for item in items if id(item) in unserved])
        items[:] = [item for item in items if id(item) not in unserved]
    if MODE == "limit-cut" and os.environ.get("CACHELIMIT_PEER_CUT_TESTS", "generation") != "all":
        kept = [item for item in items if generation_test(item)]
        config.hook.pytest_deselected(items=[item for item in items if not generation_test(item)])
        items[:] = kept
    for item in items:
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        qualified = f"{item.cls.__name__}::{name}" if getattr(item, "cls", None) else name  # one class's failure
        reason = baseline_reason(item.path.parent.name, qualified) or baseline_reason(item.path.parent.name, name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"cachelimit peer suite, baseline: {reason}"))
        if name in VACUOUS:
            reason = f"cachelimit peer suite, checks nothing on this release: {VACUOUS[name]}"
            item.add_marker(pytest.mark.xfail(strict=True, raises=DeprecationWarning, reason=reason))
        reason = skip_reason(name, MODE)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cachelimit peer suite, cache_limit={LIMIT}: {reason}"))
        reason = cut_reason(name, MODE)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cachelimit peer suite, cache_limit={LIMIT} cuts: {reason}"))
        if cross_path(item.name.split("[")[0]) and (skip_reason(name, MODE) or cut_reason(name, MODE)):
            raise pytest.UsageError(f"{item.nodeid} is a cross-path test (required to pass) and named in SKIPS/CUT")


def pytest_sessionfinish(session) -> None:
    folder = os.environ.get("CACHELIMIT_PEER_CALLS")
    if folder and CALLS:
        Path(folder, f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json").write_text(json.dumps(CALLS))


def pytest_report_header(config) -> str:
    return f"cachelimit peer suite: mode {MODE}" + (f", default cache_limit={LIMIT}" if MODE in DEFAULT_LIMITS else "")
