"""Whether a model's recurrent layers carry their state through a forward of several tokens after the first.

transformers' recurrent mixers (SSM, linear attention, short convolutions) choose between two paths: a one-token step
that updates the cached state, and a whole-sequence pass for any longer input. A prompt read in chunks
(`prefill_chunk_size`) and new text after a returned cache are such longer inputs arriving after the first forward:
they are exact only where that whole-sequence pass starts from the cached state (the conv window concatenated in
front, the scan seeded with the recurrent state). Where it starts from zero (transformers 5.15-5.24's Jamba: its
selective scan takes no initial state), every chunk after the first, or the new text, is computed as if the
sequence began there; plain transformers is wrong there too. cachelimit refuses those runs before any token.

The answer comes from what the model's layers do, not from a family name: a probe on the model itself. After one
forward of two tokens into a fresh transformers cache, one kind of state (the conv window, or the recurrent state)
of the first layer holding it is set to NaN and two more tokens are read in one forward: a layer that carries that
state into the forward makes the logits NaN, one that restarts it leaves them finite. Binary, no tolerance, a few
forwards of at most two tokens; the answer is kept per model class, device type and dtype (the kernels a mixer runs
depend on them). Whether the state that is read is also used rightly is what the tests check against transformers'
own unchunked run, for every recurrent family (`tests/recurrent_mixin.py`). transformers 5.14.0, whose mixers read
their state but misapply it on several tokens (LFM2, Nemotron-H, Zamba 2: measured), is refused by release.
"""

from __future__ import annotations

import threading

import torch
from transformers import DynamicCache

from .compat import CACHE_ARGUMENT, CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN, RECURRENT_STATE_CARRIED, require
from .layer_types import RECURRENT, layer_kinds

#: the state kinds of transformers' recurrent cache layers, as the refusal names them
STATE_KINDS = {"conv_states": "convolution", "recurrent_states": "recurrent"}

_VERDICTS: dict[tuple, tuple[str, ...]] = {}
_LOCK = threading.Lock()


def has_recurrent_layers(config) -> bool:
    return any(kind.state in RECURRENT for kind in layer_kinds(config))


def _states(layer, kind: str) -> list[torch.Tensor]:
    return [state for state in (getattr(layer, kind, None) or {}).values() if isinstance(state, torch.Tensor)]


def _forward(model, ids: torch.Tensor, start: int, cache) -> torch.Tensor:
    """Logits of `ids` at positions `start`..., read into `cache` (explicit positions and mask, as `generate` gives)."""
    positions = torch.arange(start, start + ids.shape[1], device=ids.device)[None]
    mask = torch.ones(1, start + ids.shape[1], dtype=torch.long, device=ids.device)
    output = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{CACHE_ARGUMENT: cache}
    )
    return output.logits


def _probe(model) -> tuple[str, ...]:
    """The state kinds the model's recurrent layers restart (do not read) in a second forward of two tokens."""
    device = model.get_input_embeddings().weight.device
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.arange(4, device=device)[None] % vocab
    restarted = []
    devices = [device] if device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        for kind in STATE_KINDS:
            cache = DynamicCache(config=model.config)  # transformers' own, as an unbounded run builds it
            _forward(model, ids[:, :2], 0, cache)
            holding = next((layer for layer in cache.layers if _states(layer, kind)), None)
            if holding is None:  # no layer of the model keeps this kind of state
                continue
            for state in _states(holding, kind):
                state.fill_(float("nan"))
            if not bool(_forward(model, ids[:, 2:], 2, cache).isnan().any()):
                restarted.append(STATE_KINDS[kind])
    return tuple(restarted)


def restarted_states(model) -> tuple[str, ...]:
    """The kinds of state ("convolution", "recurrent") this model's recurrent layers restart on a forward of several
    tokens after the first; () where they carry every state (or the model has no recurrent layers)."""
    if not has_recurrent_layers(model.config):
        return ()
    weight = model.get_input_embeddings().weight
    key = (type(model), weight.device.type, weight.dtype)
    with _LOCK:
        if key not in _VERDICTS:
            _VERDICTS[key] = _probe(model)
        return _VERDICTS[key]


def restart_reason(model) -> str | None:
    """Why this model cannot read several tokens in a forward after the first exactly (None: it can)."""
    restarted = restarted_states(model)
    if not restarted:
        return None
    kinds = " and ".join(restarted)
    return (
        f"{type(model).__name__}'s recurrent layers restart their {kinds} state on a forward of several tokens after "
        "the first, so it would be computed as if the text began there (transformers itself gives wrong results there)"
    )


def later_forward_widths(seen: int, new: int, chunk: int | None) -> list[int]:
    """Tokens of each forward that reads `new` tokens after `seen` (0: a fresh cache) that is not the first forward of
    the cache: the prompt's chunks after the first (`chunk`: `prefill_chunk_size`), or all of them after a cache."""
    if chunk is None:
        widths = [new]
    elif CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN:  # 4.x chunks all but the last token, then reads it alone
        widths = [min(chunk, new - 1 - start) for start in range(0, new - 1, chunk)] + [1]
    else:
        widths = [min(chunk, new - start) for start in range(0, new, chunk)]
    return widths if seen else widths[1:]


def check_multi_token_continuation(model, seen: int, width: int | None, chunk: int | None) -> None:
    """Refuse (ValueError, before any token) a run that would read several tokens in a forward after the first on a
    model whose recurrent layers restart their state there. `seen`: tokens the given cache has read (0: none);
    `width`: columns of the inputs; `chunk`: `prefill_chunk_size`."""
    if width is None or width - seen < 2:
        return
    longest = max(later_forward_widths(seen, width - seen, chunk), default=0)
    if longest < 2 or not has_recurrent_layers(model.config):
        return
    forwards = f"in chunks of {chunk} tokens" if chunk is not None else "in one forward"
    if seen:
        what = f"new text after a returned cache ({width - seen} tokens it has not read, {forwards})"
        remedy = "start a new generation over the whole text instead"
    else:
        what = f"`prefill_chunk_size={chunk}` (the prompt read {forwards})"
        remedy = "leave `prefill_chunk_size` unset for this model"
    require(f"{what} on a model with recurrent layers", RECURRENT_STATE_CARRIED)
    reason = restart_reason(model)
    if reason is not None:
        raise ValueError(f"{what} cannot be computed exactly: {reason}; {remedy}.")
