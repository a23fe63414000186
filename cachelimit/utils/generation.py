"""The shared body of every family's patched `prepare_inputs_for_generation`."""

from __future__ import annotations

import torch

from ..compat import CACHE_ARGUMENT, passed_cache
from ..window_cache import BoundedCache
from .masks import step_attention_mask


def bounded_prepare_inputs(model, original, input_ids, cache_limit, num_sink_tokens, **kwargs) -> dict:
    """Prepare one forward of a bounded generation.

    transformers' own preparation slices the inputs; on top of it this announces the step to the cache (which
    plans the slots every layer writes), replaces the 2D mask, which keeps growing by one column per step, by a
    4D mask over exactly the keys the layers will return, and passes explicit position ids: after trimming,
    the model's fallback (`past_key_values.get_seq_length()`) would be wrong.
    """
    if cache_limit is None:
        if num_sink_tokens is not None:
            raise ValueError("`num_sink_tokens` needs a `cache_limit`: sinks are kept inside a bounded cache.")
        return original(model, input_ids, **kwargs)
    cache = passed_cache(kwargs)
    if not isinstance(cache, BoundedCache):
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
    inputs["position_ids"] = plan.positions
    inputs["attention_mask"] = step_attention_mask(model.config, plan, model.dtype)
    return inputs


def make_prepare_inputs(family_name: str):
    """A family's patched `prepare_inputs_for_generation`, with `cache_limit` and `num_sink_tokens` as named
    parameters: `generate` validates its kwargs against this signature (so no `functools.wraps`)."""
    from ..patches.applier import original_attribute

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
        original = original_attribute(type(self), "prepare_inputs_for_generation")
        return bounded_prepare_inputs(
            self,
            original,
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
