"""The bounded mask as a flex attention `BlockMask` (`attn_implementation="flex_attention"`).

A `BlockMask` is flex attention's mask: a `mask_mod(b, h, q, kv) -> bool` plus which blocks of 128 x 128 (query x
key) it must be evaluated on (partial blocks), which it may skip (empty blocks) and which are read whole (full
blocks). The plan's visibility (`StepPlan.allowed`: for each row and query, which returned key it reads, over the
sink slots, the ring's slots and the new tokens, with each row's pads and sinks) is the `mask_mod`: it is looked up in
that boolean tensor, padded with False to whole blocks (a kernel may evaluate the mask beyond the last key or query
of a partial block, and must find False there, not memory past the tensor).

- A multi-token forward (a prefill chunk, new text after a returned cache) gets a `BlockMask` made from its
  visibility by `create_block_mask`, with empty blocks skipped and full blocks read whole.
- A decode step reuses one `BlockMask` per batch and key count (kept in the plan's memo, like the dense masks): every
  key block is declared partial, so the kernel evaluates the `mask_mod` everywhere and the block layout never goes
  stale, and the `mask_mod` reads one kept buffer, into which each step copies its visibility (one copy; none at
  all while the visibility stays all-true, once the ring is full of real tokens). A `BlockMask` cannot be sliced
  the way the dense masks reuse their all-true row, so this builder owns its reuse.
- The first forward of a run, when nothing is cut, is masked by the model itself (`StepPlan.model_mask`): transformers
  builds its own `BlockMask` then, as without a limit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import _DEFAULT_SPARSE_BLOCK_SIZE as BLOCK
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from ..core.plan import StepPlan


def padded(allowed: torch.Tensor) -> torch.Tensor:
    """[B, queries, keys] visibility padded with False to whole blocks in both dimensions."""
    queries, keys = allowed.shape[-2:]
    return F.pad(allowed, (0, -keys % BLOCK, 0, -queries % BLOCK), value=False)


def flex_mask(config, plan: StepPlan, dtype: torch.dtype) -> BlockMask:
    """The `BlockMask` of one planned step (see the module docstring)."""
    if plan.decode:
        return decode_block_mask(plan)
    visibility = padded(plan.allowed)

    def mask_mod(batch, head, query, key):
        return visibility[batch, query, key]

    batch, queries, keys = plan.allowed.shape
    return create_block_mask(mask_mod, batch, None, queries, keys, device=plan.allowed.device)


def decode_block_mask(plan: StepPlan) -> BlockMask:
    """A decode step's `BlockMask`: every key block partial, the `mask_mod` reading a kept buffer that this step's
    visibility is copied into (skipped while it stays all-true)."""
    batch, _, keys = plan.allowed.shape
    memo_key = ("flex_attention", batch)
    kept = plan.memo.get(memo_key)
    if kept is None or kept[0] != keys:
        kept = plan.memo[memo_key] = (keys, *reusable_decode_mask(batch, keys, plan.allowed.device), [None])
    _, buffer, block_mask, state = kept
    if plan.reads_every_key:
        if state[0] != "all":
            buffer[:, :keys] = True
            state[0] = "all"
    else:
        buffer[:, :keys] = plan.allowed[:, 0]
        state[0] = None
    return block_mask


def reusable_decode_mask(batch: int, keys: int, device) -> tuple[torch.Tensor, BlockMask]:
    """A [batch, keys padded to whole blocks] buffer (False) and a one-query `BlockMask` over `keys` keys whose every
    key block is partial and whose `mask_mod` reads the buffer."""
    buffer = torch.zeros(batch, keys + (-keys % BLOCK), dtype=torch.bool, device=device)
    blocks = buffer.shape[-1] // BLOCK

    def mask_mod(row, head, query, key):
        return buffer[row, key]

    num_blocks = torch.full((batch, 1, 1), blocks, dtype=torch.int32, device=device)
    indices = torch.arange(blocks, dtype=torch.int32, device=device).expand(batch, 1, 1, blocks).contiguous()
    block_mask = BlockMask.from_kv_blocks(
        num_blocks, indices, BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(1, keys)
    )
    return buffer, block_mask
