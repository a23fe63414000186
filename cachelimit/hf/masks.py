"""The attention-backend seam: turn a step plan's visibility into the mask format of an attention implementation.

One registry, `MASK_BUILDERS`, keyed by `config._attn_implementation`: the only place that knows a backend's mask
format. A bounded run is refused (before any token) on an implementation without a builder, so adding a backend is
adding one builder here: `builder(config, plan, dtype) -> mask` gets the whole `core.plan.StepPlan` (its boolean
`allowed` visibility, and what a builder may reuse: `reads_every_key` says the visibility is all-true, `memo` keeps
what can be reused across the steps of a run). Eager and SDPA masks are transformers' own, built by its
`masking_utils` functions from the visibility; a decode step that reads every slot reuses one converted all-true row.
Flex attention gets a `BlockMask` whose `mask_mod` reads the visibility (`hf.flex_mask`). Flash attention has no
builder (refused): see docs/how-it-works.md, "Flash attention and GPUs", for what it would need.

Why a decode step that reads every slot still passes a mask (issue 28), for any path that would drop it: on the CPU
a mask-free SDPA decode step is slower in bf16, and not because of the kernel or the mask. Every case takes the same
fused kernel, `aten::_scaled_dot_product_flash_attention_for_cpu` (a boolean mask is first turned into an additive
one; no case falls back to `_scaled_dot_product_attention_math`). What changes is the layout transformers 5.24.0's
`sdpa_attention_forward` picks for grouped-query attention: with a mask, eager, it folds the query heads sharing a
key/value head into queries of that head (`pack_gqa`: SmolLM2's 9 heads x 1 query become 3 heads x 3 queries); with
no mask it passes `enable_gqa=True` (9 heads x 1 query over 3 key/value heads); under `torch.compile` with a mask it
repeats the keys (`repeat_kv`, 9 heads). Measured with plain SDPA on those shapes (`benchmarks/sdpa_mask_kernels.py`,
`docs/sdpa_mask_kernels.md`; 2-core AMD EPYC, load ~20, one thread, torch 2.13.0, CPU-time ratios to the masked
packed call, median [min, max] of 7): in bf16 the mask-free `enable_gqa` call costs 6.38 [4.87, 8.61] x the masked
packed one at 2k keys (2.1 ms vs 0.32 ms) and 4.87 [4.57, 5.86] x at 8k, while the packed call without a mask costs
0.94 [0.84, 1.14] and 1.07 [0.85, 1.18] x (the mask itself is free), and `repeat_kv` with or without a mask
5.1-7.2 x; in fp32 the gap is small (`enable_gqa` 1.04 [0.76, 1.16] and 1.24 [1.03, 1.70] x; `repeat_kv` 1.6-2.4
x). In bf16 the kernel's cost is mostly per head and key, whatever the queries: 9 heads of one query over 2k keys
take 2.1 ms, 3 heads of three 0.32 ms (fp32: 0.24 and 0.23 ms). So dropping the all-true mask here would move a bf16 step from the packed layout to
`enable_gqa` (the 1.55 x step cost seen at 2k); a mask-free path is only a gain if it also packs the query heads.
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
