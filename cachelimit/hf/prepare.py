"""The `prepare_inputs_for_generation` every patched model class gets (the same for every family).

transformers' own preparation slices the inputs; on top of it, for a bounded run (the cache is a `BoundedCache`:
it carries the limit), this announces the step to the cache (which plans the slots every layer writes), replaces
the 2D mask, which keeps growing by one column per step, by a 4D mask over exactly the keys the layers will return
(one per attention type of a hybrid model: `hf.masks`), and passes explicit position ids: after trimming, the
model's fallback (`past_key_values.get_seq_length()`) would be wrong. A decode step of a token `generate` appended
reads nothing back from the device (`BoundedCache.is_generated`): its mask column is one in every row.
"""

from __future__ import annotations

import inspect

import torch

from ..core.cache import BoundedCache
from .compat import (
    CACHE_ARGUMENT,
    MASK_POSITION_OF_PADS,
    chunk_positions_ignore_padding,
    passed_cache,
    recurrent_mask,
)
from .installed import original_attribute
from .masks import step_mask
from .validation import check_window


def bounded_prepare_inputs(model, original, input_ids, cache_limit, num_sink_tokens, **kwargs) -> dict:
    """Prepare one forward; `original` is the `prepare_inputs_for_generation` cachelimit replaced."""
    cache = passed_cache(kwargs)
    if not isinstance(cache, BoundedCache):
        if cache_limit is None:
            if num_sink_tokens is not None:
                check_window(cache_limit, num_sink_tokens)
            return original(model, input_ids, **kwargs)
        raise ValueError(
            f"`cache_limit` needs a cachelimit.BoundedCache as `{CACHE_ARGUMENT}`, got {type(cache).__name__}; "
            "call `model.generate(..., cache_limit=...)` on a model patched with `cachelimit.patch()`."
        )
    attention_mask = kwargs.pop("attention_mask", None)
    cache.settle()  # the previous forward finished (generate prepares the next one only then)
    with cache.hiding_compileable():  # the original would build a causal mask for a compileable cache
        inputs = original(model, input_ids, attention_mask=None, **kwargs)
    new_tokens = inputs["input_ids"] if inputs.get("input_ids") is not None else inputs["inputs_embeds"]
    batch, num_new = new_tokens.shape[:2]
    seen = cache.get_seq_length()
    if attention_mask is not None and attention_mask.shape[-1] != seen + num_new:
        raise ValueError(
            f"`attention_mask` has {attention_mask.shape[-1]} columns, but the cache has seen {seen} tokens and "
            f"{num_new} are new: pass the mask of the whole sequence."
        )
    if num_new == 1 and cache.is_generated(seen):  # real in every row: nothing to read from the device
        new_real = None
        if attention_mask is not None:
            cache.note_unread_mask(attention_mask)
    elif attention_mask is None:
        new_real = torch.ones(batch, num_new, dtype=torch.bool, device=new_tokens.device)
    else:
        new_real = attention_mask[:, -num_new:].to(device=new_tokens.device, dtype=torch.bool)
    plan = cache.begin_step(new_real)
    # transformers' own position ids (or the user's), as an unbounded run would use them: they equal the plan's
    # on every real token except after right padding, where transformers counts from the pads' filler position.
    # RoPE sinks are rotated to positions computed from the plan's, so there the plan's are used (the generate
    # wrapper has refused inputs on which the two differ), and so they are in a 4.x chunked prefill, whose own
    # positions ignore left padding.
    given, rotates = inputs.get("position_ids"), cache.rotates_sinks
    if given is None or rotates or chunk_positions_ignore_padding(given, kwargs.get("cache_position")):
        inputs["position_ids"] = plan.positions
        if MASK_POSITION_OF_PADS is not None and not rotates and new_real is not None:  # as the release's own
            inputs["position_ids"] = plan.positions.masked_fill(~new_real, MASK_POSITION_OF_PADS)  # prepare does
    if plan.model_mask:  # the first forward, nothing cut: the model's own causal (and sliding) masks are exact
        inputs["attention_mask"] = attention_mask
    elif len(cache.groups) == 1 and not cache.recurrent_kinds:  # one attention type: one mask
        inputs["attention_mask"] = step_mask(model.config, plan, model.dtype)
    else:  # a hybrid model takes one mask per layer type, as a dict; recurrent layers get transformers' own
        plans = cache.plans_by_type().items()
        masks = {kind: step_mask(model.config, each, model.dtype) for kind, each in plans}
        for kind in cache.recurrent_kinds:
            masks[kind] = recurrent_mask(model.config, attention_mask, num_new, cache)
        inputs["attention_mask"] = masks
    return inputs


def forwards_embeds(method) -> bool:
    """Whether a `prepare_inputs_for_generation` names `inputs_embeds`: transformers generates from embeddings only
    where it does (Nemotron-H's does not), so the patched method must say what the one it replaces says."""
    return "inputs_embeds" in inspect.signature(method).parameters


def prepare_calling(original=None, embeds: bool = True):
    """A `prepare_inputs_for_generation` with `cache_limit` and `num_sink_tokens` as named parameters (`generate`
    validates its kwargs against this signature, so no `functools.wraps`), and `inputs_embeds` where the method it
    replaces has it (`embeds`). It calls the method it replaced, looked up at each call, or `original` when given: a
    running bounded `generate` pins the methods it started with (`hf.generate`), so that an `unpatch()` in the middle
    cannot change them under it."""

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache_limit: int | None = None,
        num_sink_tokens: int | None = None,
        **kwargs,
    ) -> dict:
        """cachelimit's `prepare_inputs_for_generation`: the original, plus a bounded KV cache when `cache_limit`
        is given (see `cachelimit.hf.prepare`)."""
        # `inputs_embeds` must be a named parameter (`generate` looks for it in this signature); everything else
        # passes through under the names the installed transformers uses (`past_key_values` or `cache`,
        # `cache_position`, `next_sequence_length`, ...: see `cachelimit.hf.compat`).
        return bounded_prepare_inputs(
            self,
            original or original_attribute(type(self), "prepare_inputs_for_generation"),
            input_ids,
            cache_limit,
            num_sink_tokens,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )

    if not embeds:
        signature = inspect.signature(prepare_inputs_for_generation)
        kept = [parameter for name, parameter in signature.parameters.items() if name != "inputs_embeds"]
        prepare_inputs_for_generation.__signature__ = signature.replace(parameters=kept)
    return prepare_inputs_for_generation


#: installed on every patched class whose own method forwards `inputs_embeds`, and on the others
prepare_inputs_for_generation = prepare_calling()
prepare_inputs_without_embeds = prepare_calling(embeds=False)
