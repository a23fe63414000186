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
