"""Turn the planned boolean visibility into the mask format of the model's attention implementation."""

from __future__ import annotations

import torch
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from ..compat import query_arguments

SUPPORTED_ATTENTION = ("eager", "sdpa")


def attention_mask_for(config, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, queries, keys] booleans -> the 4D mask transformers' own mask builders would produce
    (boolean for SDPA, additive for eager). Models pass a 4D mask through untouched."""
    implementation = config._attn_implementation
    if implementation not in SUPPORTED_ATTENTION:
        raise ValueError(f"cache_limit supports attn_implementation in {SUPPORTED_ATTENTION}, got {implementation!r}.")
    batch, queries, keys = allowed.shape
    return ALL_MASK_ATTENTION_FUNCTIONS[implementation](
        batch_size=batch,
        **query_arguments(queries, allowed.device),
        kv_length=keys,
        mask_function=lambda b, h, q, k: allowed[b, q, k],
        attention_mask=None,
        allow_is_causal_skip=False,
        dtype=dtype,
        device=allowed.device,
    )


def step_attention_mask(config, plan, dtype: torch.dtype) -> torch.Tensor:
    """The 4D mask of a planned step (`plan.allowed` converted by `attention_mask_for`). A decode step that reads
    every slot (`plan.full_masks` set) has an all-true visibility: its converted mask is a view of one converted
    all-true row kept in `plan.full_masks` (rebuilt at least twice as wide when the keys outgrow it), so such a
    step converts no mask at all."""
    if plan.full_masks is None:
        return attention_mask_for(config, plan.allowed, dtype)
    batch, _, keys = plan.allowed.shape
    key = (config._attn_implementation, dtype, batch)
    mask = plan.full_masks.get(key)
    if mask is None or mask.shape[-1] < keys:
        width = max(keys, 0 if mask is None else 2 * mask.shape[-1])
        every_key = torch.ones(batch, 1, width, dtype=torch.bool, device=plan.allowed.device)
        mask = plan.full_masks[key] = attention_mask_for(config, every_key, dtype)
    return mask[..., :keys]
