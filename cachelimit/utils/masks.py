"""Turn the planned boolean visibility into the mask format of the model's attention implementation."""

from __future__ import annotations

import torch
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

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
        q_length=queries,
        kv_length=keys,
        mask_function=lambda b, h, q, k: allowed[b, q, k],
        attention_mask=None,
        allow_is_causal_skip=False,
        dtype=dtype,
        device=allowed.device,
    )


def step_attention_mask(config, plan, dtype: torch.dtype) -> torch.Tensor:
    """The 4D mask of a planned step (`plan.allowed` converted by `attention_mask_for`). A decode step that reads
    every slot (a full ring of real tokens) has the same all-true visibility step after step: its converted mask
    is built once and reused (the plan's `full_masks`), so a steady decode step builds no mask at all."""
    if plan.full_masks is None:
        return attention_mask_for(config, plan.allowed, dtype)
    key = (config._attn_implementation, dtype, tuple(plan.allowed.shape))
    mask = plan.full_masks.get(key)
    if mask is None:
        mask = plan.full_masks[key] = attention_mask_for(config, plan.allowed, dtype)
    return mask
