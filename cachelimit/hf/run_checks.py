"""What a bounded run cannot do, refused before any token: one small check each, run in order by `check_run`.

The arguments themselves (limit, sinks, the model's windows) are validated by `hf.request.BoundedRequest`; these are
the checks of the rest of the call: how the cache is used, assisted decoding, prefill chunking, the attention
implementation, position ids and prompts that RoPE sinks cannot serve, and the length a learned-position model can
reach. Each is a function of one `Run`, so a new check is one function in `CHECKS`.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ..core.policy import MAX_CACHE_LIMIT
from .cache_setting import setting_of
from .compat import CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN, GENERATE_ADVANCES_POSITION_IDS, require
from .generation_config import config_window
from .masks import check_attention
from .request import BoundedRequest
from .validation import check_int

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class PastContextWarning(UserWarning):
    """A bounded run that can reach positions past the model's context (`scored_positions`); the command line shows
    it as one line, where it silences library warnings."""


ASSISTED = ("assistant_model", "prompt_lookup_num_tokens", "assistant_early_exit")


@dataclass(frozen=True)
class Run:
    """One bounded `generate` call, as the checks see it."""

    model: torch.nn.Module
    family: Any  # the model's `cachelimit.families.Family`
    request: BoundedRequest
    config: Any  # the call's resolved GenerationConfig
    kwargs: dict
    tokens: torch.Tensor | None  # input ids or embeddings
    mask: torch.Tensor | None  # the 2D attention mask


def cache_use(run: Run) -> None:
    if run.config.use_cache is False:
        raise ValueError("`cache_limit` bounds the KV cache, so it needs `use_cache=True` (got use_cache=False).")
    if run.config.cache_implementation is not None:
        raise ValueError(
            f"`cache_limit` cannot be combined with cache_implementation={run.config.cache_implementation!r}: "
            "the bounded cache is its own implementation."
        )


def assisted_decoding(run: Run) -> None:
    for name in ASSISTED:
        if run.kwargs.get(name) is not None or getattr(run.config, name, None):
            raise ValueError(f"`cache_limit` does not support assisted decoding (`{name}` was given).")


def prefill_chunking(run: Run) -> None:
    if run.config.prefill_chunk_size is None:
        return
    check_int("prefill_chunk_size", run.config.prefill_chunk_size, 1, MAX_CACHE_LIMIT)  # beyond: int64 overflows
    ids = run.kwargs.get("input_ids") if run.tokens is None or run.tokens.dim() != 2 else run.tokens
    width = getattr(ids, "shape", (0, 0))[-1]
    if width == 1 and CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN:  # 4.x chunks the prompt but its last token
        require("`prefill_chunk_size` with a one-token prompt", "5.0.0")


def attention_implementation(run: Run) -> None:
    check_attention(run.model.config._attn_implementation)


def position_ids(run: Run) -> None:
    given = run.kwargs.get("position_ids")
    if given is not None:
        require("`position_ids` in a bounded `generate`", GENERATE_ADVANCES_POSITION_IDS)
    if run.tokens is not None and run.request.sinks and run.family.uses_rope:
        check_prompt(run.tokens.shape[:2], run.mask, given)


def _longest_prompt(run: Run) -> int:
    """The most real tokens a row of the prompt holds."""
    return int(run.mask.sum(-1).max()) if run.mask is not None else run.tokens.shape[1]


def _new_tokens(run: Run) -> int:
    config = run.config
    if config.max_new_tokens is not None:
        return config.max_new_tokens
    return (config.max_length if config.max_length is not None else 20) - run.tokens.shape[1]


def learned_positions(run: Run) -> None:
    """A learned-position family cannot go past its last position (transformers fails mid-run there)."""
    if run.family.check_generation is None or run.tokens is None:
        return
    run.family.check_generation(run.model, _longest_prompt(run), _new_tokens(run))


def scored_positions(run: Run) -> None:
    """Warn when a scored policy's run can reach past the model's context: its kept keys keep their positions and new
    tokens take absolute ones (docs/policies.md, "Positions"), so, unlike the window, it lets a query read keys from
    further back than the model was trained on (RoPE attention depends on that distance). It is served exactly as
    defined, and an unbounded run would be past its context too, so this is a warning, not a refusal (SmolLM2, 113k
    tokens, L=256: perplexity 3,137 with keydiff against 11.4 with the window and 4 sinks)."""
    context = getattr(run.model.config, "max_position_embeddings", None)
    if run.request.policy is None or not run.family.uses_rope or run.tokens is None or not context:
        return
    reachable = _longest_prompt(run) + max(_new_tokens(run) - 1, 0)  # the last new token is never fed back
    if reachable > context:
        warnings.warn(
            f"cache_policy={run.request.policy.name!r} keeps its keys' original positions, so this run can reach "
            f"position {reachable - 1:,}, past the model's context (max_position_embeddings={context:,}): its "
            "queries would read kept keys from further back than the model was trained on, where a RoPE model's "
            "output degrades as an unbounded run's does. The window (cache_policy=None, with num_sink_tokens) keeps "
            "every distance within the limit, for endless runs.",
            PastContextWarning,
            stacklevel=_outside_the_package(),
        )


def _outside_the_package() -> int:
    """The `stacklevel` that points a warning at the first frame outside cachelimit (the caller's `generate`)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


CHECKS = (
    cache_use,
    assisted_decoding,
    prefill_chunking,
    attention_implementation,
    position_ids,
    learned_positions,
    scored_positions,
)


def check_run(run: Run) -> None:
    for check in CHECKS:
        check(run)


def check_prompt(shape: tuple[int, int], attention_mask, position_ids) -> None:
    """Refuse what a bounded run with RoPE sinks cannot serve exactly.

    Such a run moves each sink key to the StreamingLLM position computed from the row's own count of real tokens,
    so its positions must be exactly those: each row's real tokens count 0, 1, 2, ... from its first real token.
    That rules out right padding (a row ending in pads, after which transformers numbers the new tokens from the
    pads' filler position instead) and user `position_ids` that differ on real tokens. Without RoPE sinks a
    bounded run feeds the model transformers' own (or the user's) position ids, exactly as an unbounded run does.
    """
    batch, width = shape
    if attention_mask is not None and attention_mask.dim() == 2 and width > 0:
        last = attention_mask[:, -1] == 0
        if bool(last.any()):
            row = int(last.nonzero()[0, 0])
            raise ValueError(
                f"`attention_mask` ends with padding in row {row} (right padding), which `num_sink_tokens` on a RoPE "
                "model cannot serve exactly: pad on the left (tokenizer.padding_side = 'left')."
            )
    if position_ids is None:
        return
    if attention_mask is None:
        real = torch.ones(batch, width, dtype=torch.bool, device=position_ids.device)
    else:
        real = attention_mask.to(device=position_ids.device).bool()
    expected = real.long().cumsum(-1) - 1
    if position_ids.dim() != 2 or position_ids.shape[-1] != width or position_ids.shape[0] not in (1, batch):
        raise ValueError(
            f"`position_ids` of shape {tuple(position_ids.shape)} cannot be honoured with `num_sink_tokens` on a "
            f"RoPE model, which computes the positions of its [{batch}, {width}] inputs itself: leave them out."
        )
    given = position_ids.expand(batch, -1)
    wrong = (given != expected) & real
    if bool(wrong.any()):
        row, column = (int(i) for i in wrong.nonzero()[0])
        raise ValueError(
            f"`position_ids` differ from the positions `num_sink_tokens` on a RoPE model needs (each row's real "
            f"tokens count 0, 1, 2, ... from its first real token): row {row}, column {column} has "
            f"{int(given[row, column])}, expected {int(expected[row, column])}. Leave `position_ids` out."
        )


def _bounded_assistant(assistant) -> bool:
    fixed = getattr(setting_of(assistant), "fixed", None)
    bounded_setting = fixed is not None and fixed.cache_limit is not None
    return bounded_setting or config_window(assistant.generation_config) != (None, None)


def check_assistant(generation_config, kwargs) -> None:
    """A bounded cache forgets evicted tokens, so it cannot be rolled back as assisted decoding needs: refuse a
    bounded assistant before any token (`kwargs`: the main model's call), or a bounded run made as an assistant."""
    assistant = kwargs.get("assistant_model")
    if assistant is not None and _bounded_assistant(assistant):
        raise ValueError(
            "`assistant_model` has a bounded cache (cache_limit or set_cache_implementation('window'/'sink')), but "
            "assisted decoding rolls the assistant's cache back, which a bounded cache cannot do: use an assistant "
            "without a cache limit."
        )
    if getattr(generation_config, "is_assistant", False):
        raise ValueError(
            "This model runs as an `assistant_model` with a bounded cache, but assisted decoding rolls the "
            "assistant's cache back, which a bounded cache cannot do: use an assistant without a cache limit."
        )
