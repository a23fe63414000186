"""`output_attentions=True` under a bounded cache: attention maps with their key columns in sequence order.

A layer of a `BoundedCache` returns its keys in slot order (sink slots, then the ring, which wraps), so the raw
attention weights of a step are in that order too. People inspect attention maps to see what a token looks at
(sinks especially), so `generate` must hand them back in sequence order, like transformers does without a bound.
Rather than copying the cache into order every step, the attention tensors of the model's output are permuted
after the forward (a forward hook installed for the duration of a bounded `generate`).

The key columns of a step's attention map, in order:
- if the bound has not cut anything yet (no column has left the window): every column seen so far, exactly as an
  unbounded run returns them (sink slots are then masked duplicates of window columns and are left out);
- once columns have left the window: `[the S sinks | the window, oldest first, the current token(s) last]`. Sink
  `j` of a row is that row's j-th real token; its weight is 0 while that token is still inside the window, where
  its weight appears in the window part (so each kept column's weight is reported once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .compat import passed_cache
from .policy import WindowPolicy
from .step_plan import StepPlan


def key_order(plan: StepPlan, policy: WindowPolicy) -> torch.Tensor:
    """[queries, shown keys]: for each query of the step, which of the keys the layers returned (their index in
    the attention weights' last dimension) is shown at each position of the sequence-ordered map."""
    sinks, ring = policy.num_sinks, policy.ring_size
    queries = plan.num_new
    device = plan.positions.device
    if plan.decode:
        window = torch.arange(plan.visible, device=device)
        if plan.visible == ring:  # full ring: the oldest column sits in the slot after the newest
            window = (window + plan.start + 1) % ring
        window = sinks + window
        oldest = plan.start + 1 - plan.visible
    else:  # [sink copies | kept past, oldest first | new tokens]: the window part is in order already
        past = plan.past_slots.numel()
        window = sinks * plan.sink_copies + torch.arange(past + queries, device=device)
        oldest = plan.start - past
    order = window.expand(queries, -1)
    if sinks and oldest > 0:
        own_copy = plan.sink_copies == queries and queries > 1  # per-query sink copies (RoPE, windowed chunk)
        copy = (
            torch.arange(queries, device=device) if own_copy else torch.zeros(queries, dtype=torch.long, device=device)
        )
        sink_keys = copy[:, None] * sinks + torch.arange(sinks, device=device)
        order = torch.cat([sink_keys, order], dim=1)
    return order


def in_sequence_order(weights: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Attention weights [batch, heads, queries, returned keys] -> [batch, heads, queries, shown keys]."""
    batch, heads = weights.shape[:2]
    return weights.gather(-1, order.to(weights.device)[None, None].expand(batch, heads, -1, -1))


@contextlib.contextmanager
def attentions_in_sequence_order(model: torch.nn.Module, cache) -> Iterator[None]:
    """While active, every forward of `model` that runs on `cache` (a `BoundedCache`) and returns attentions
    returns them in sequence order (see the module docstring). Other forwards (other caches, other threads' runs)
    are left alone."""

    def reorder(module, args, kwargs, output):
        attentions = getattr(output, "attentions", None)
        if not attentions or passed_cache(kwargs) is not cache or cache.plan is None:
            return None
        orders: dict[int, torch.Tensor] = {}  # per cache owning a layer (hybrid models: one per layer group)

        def order_of(index: int):
            owner = cache.layers[index].cache if index < len(cache.layers) else cache
            if id(owner) not in orders:
                orders[id(owner)] = key_order(owner.plan, owner.policy)
            return orders[id(owner)]

        output.attentions = tuple(
            None if layer is None else in_sequence_order(layer, order_of(index))
            for index, layer in enumerate(attentions)
        )
        return output

    handle = model.register_forward_hook(reorder, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
