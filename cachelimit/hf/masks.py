"""The attention-backend seam: turn a step plan's visibility into the mask format of an attention implementation.

One registry, `MASK_BUILDERS`, keyed by `config._attn_implementation`: the only place that knows a backend's mask
format. A bounded run is refused (before any token) on an implementation without a builder, so adding a backend is
adding one builder here: `builder(config, plan, dtype) -> mask` gets the whole `core.plan.StepPlan` (its boolean
`allowed` visibility, and what a builder may reuse: `reads_every_key` says the visibility is all-true, `memo` keeps
what can be reused across the steps of a run). Eager and SDPA masks are transformers' own, built by its
`masking_utils` functions from the visibility; a decode step that reads every slot reuses one converted all-true row.
Flex attention gets a `BlockMask` whose `mask_mod` reads the visibility (`hf.flex_mask`). Flash attention has no
builder (refused): see README "Flash attention and GPUs" for what it would need.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from ..core.plan import StepPlan
from ..core.rows import reused_prefix
from .compat import query_arguments
from .flex_mask import flex_mask

MaskBuilder = Callable[[object, StepPlan, torch.dtype], object]


def transformers_mask(config, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, queries, keys] booleans -> the 4D mask transformers' own mask builders produce for the model's
    attention implementation (boolean for SDPA, additive for eager). Models pass a 4D mask through untouched."""
    batch, queries, keys = allowed.shape
    return ALL_MASK_ATTENTION_FUNCTIONS[config._attn_implementation](
        batch_size=batch,
        **query_arguments(queries, allowed.device),
        kv_length=keys,
        mask_function=lambda b, h, q, k: allowed[b, q, k],
        attention_mask=None,
        allow_is_causal_skip=False,
        dtype=dtype,
        device=allowed.device,
    )


def dense_mask(config, plan: StepPlan, dtype: torch.dtype) -> torch.Tensor:
    """Eager and SDPA: transformers' mask of the plan's visibility. A decode step that reads every slot has an
    all-true visibility: its mask is a view of one converted all-true row kept in the plan's memo (rebuilt at least
    twice as wide when the keys outgrow it; the view itself kept while the width stays), so such a step converts no
    mask and makes no op at all."""
    if not plan.reads_every_key:
        return transformers_mask(config, plan.allowed, dtype)
    batch, _, keys = plan.allowed.shape
    device = plan.allowed.device

    def every_key(width: int) -> torch.Tensor:
        return transformers_mask(config, torch.ones(batch, 1, width, dtype=torch.bool, device=device), dtype)

    memo_key = (config._attn_implementation, dtype, batch)
    return reused_prefix(plan.memo, memo_key, keys, every_key, exact=plan.fixed_shapes)


#: attention implementation -> the builder of its masks (flex attention: `hf.flex_mask`)
MASK_BUILDERS: dict[str, MaskBuilder] = {"eager": dense_mask, "sdpa": dense_mask, "flex_attention": flex_mask}


def supported_attention() -> tuple[str, ...]:
    return tuple(MASK_BUILDERS)


def check_attention(implementation: str) -> None:
    """Refuse (ValueError, before any token) an attention implementation no mask builder serves."""
    if implementation not in MASK_BUILDERS:
        raise ValueError(
            f"`cache_limit` supports attn_implementation in {supported_attention()}, got {implementation!r}."
        )


def step_mask(config, plan: StepPlan, dtype: torch.dtype):
    """The mask of one planned step for the model's attention implementation (checked before the run:
    `check_attention`)."""
    return MASK_BUILDERS[config._attn_implementation](config, plan, dtype)
