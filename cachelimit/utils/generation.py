"""The shared body of every family's patched `prepare_inputs_for_generation`."""

from __future__ import annotations

import torch

from ..compat import CACHE_ARGUMENT, MASK_POSITION_OF_PADS, chunk_positions_ignore_padding, passed_cache
from ..layered_cache import LayeredBoundedCache
from ..window_cache import BoundedCache
from .masks import step_attention_mask
from .originals import original_attribute
from .validation import check_window


def check_prompt(shape: tuple[int, int], attention_mask, position_ids) -> None:
    """Refuse what a bounded run with RoPE sinks cannot serve exactly, before any token.

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


def bounded_prepare_inputs(model, original, input_ids, cache_limit, num_sink_tokens, **kwargs) -> dict:
    """Prepare one forward of a bounded generation (the cache is a `BoundedCache`: it carries the limit).

    transformers' own preparation slices the inputs; on top of it this announces the step to the cache (which
    plans the slots every layer writes), replaces the 2D mask, which keeps growing by one column per step, by a
    4D mask over exactly the keys the layers will return, and passes explicit position ids: after trimming,
    the model's fallback (`past_key_values.get_seq_length()`) would be wrong.
    """
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
    inputs = original(model, input_ids, attention_mask=None, **kwargs)
    new_tokens = inputs["input_ids"] if inputs.get("input_ids") is not None else inputs["inputs_embeds"]
    batch, num_new = new_tokens.shape[:2]
    seen = cache.get_seq_length()
    if attention_mask is None:
        new_real = torch.ones(batch, num_new, dtype=torch.bool, device=new_tokens.device)
    elif attention_mask.shape[-1] != seen + num_new:
        raise ValueError(
            f"`attention_mask` has {attention_mask.shape[-1]} columns, but the cache has seen {seen} tokens and "
            f"{num_new} are new: pass the mask of the whole sequence."
        )
    else:
        new_real = attention_mask[:, -num_new:].to(device=new_tokens.device, dtype=torch.bool)
    plan = cache.begin_step(new_real)
    # transformers' own position ids (or the user's), as an unbounded run would use them: they equal the plan's
    # on every real token except after right padding, where transformers counts from the pads' filler position.
    # RoPE sinks are rotated to positions computed from the plan's, so there the plan's are used (the generate
    # wrapper has refused inputs on which the two differ), and so they are in a 4.x chunked prefill, whose own
    # positions ignore left padding.
    given = inputs.get("position_ids")
    if (
        given is None
        or cache.rotary is not None
        or chunk_positions_ignore_padding(given, kwargs.get("cache_position"))
    ):
        inputs["position_ids"] = plan.positions
        if MASK_POSITION_OF_PADS is not None and cache.rotary is None:  # as the release's own prepare step does
            inputs["position_ids"] = plan.positions.masked_fill(~new_real, MASK_POSITION_OF_PADS)
    if plan.model_mask:  # the first forward, nothing cut: the model's own causal (and sliding) masks are exact
        inputs["attention_mask"] = attention_mask
    elif isinstance(cache, LayeredBoundedCache):  # hybrid: one mask per layer type (the models take a dict)
        inputs["attention_mask"] = cache.layer_type_masks(model.config, model.dtype)
    else:
        inputs["attention_mask"] = step_attention_mask(model.config, plan, model.dtype)
    return inputs


def make_prepare_inputs(family_name: str, original=None):
    """A family's patched `prepare_inputs_for_generation`, with `cache_limit` and `num_sink_tokens` as named
    parameters: `generate` validates its kwargs against this signature (so no `functools.wraps`). It calls the method
    it replaced, looked up at each call, or `original` when given (a running bounded `generate` pins the methods it
    started with, so that an `unpatch()` in the middle cannot change them under it)."""

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache_limit: int | None = None,
        num_sink_tokens: int | None = None,
        **kwargs,
    ) -> dict:
        # `inputs_embeds` must be a named parameter (`generate` looks for it in this signature); everything else
        # passes through under the names the installed transformers uses (`past_key_values` or `cache`,
        # `cache_position`, `next_sequence_length`, ...: see `cachelimit.compat`).
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

    prepare_inputs_for_generation.__qualname__ = f"{family_name}.prepare_inputs_for_generation"
    prepare_inputs_for_generation.__doc__ = (
        f"cachelimit's {family_name} `prepare_inputs_for_generation`: the original, plus a bounded KV cache "
        "when `cache_limit` is given (see `cachelimit.utils.generation.bounded_prepare_inputs`)."
    )
    return prepare_inputs_for_generation
