"""`output_attentions=True` under a bounded cache: attention maps with their key columns in sequence order.

A bounded layer returns its keys in slot order (sink slots, then the ring, which wraps: `core.ring`), so the raw
attention weights of a step are in that order too. People inspect attention maps to see what a token looks at (sinks
especially), so `generate` must hand them back in sequence order, like transformers does without a bound. Rather
than copying the cache into order every step, the attention tensors of the model's output are permuted after the
forward, by a forward hook installed for the duration of a bounded `generate`, with the order the policy gives
(`Policy.key_order`).

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

from ..core.cache import BoundedCache
from ..core.layers import BoundedLayer
from .compat import passed_cache


def in_sequence_order(weights: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Attention weights [batch, heads, queries, returned keys] -> [batch, heads, queries, shown keys]."""
    batch, heads = weights.shape[:2]
    return weights.gather(-1, order.to(weights.device)[None, None].expand(batch, heads, -1, -1))


@contextlib.contextmanager
def attentions_in_sequence_order(model: torch.nn.Module, cache: BoundedCache) -> Iterator[None]:
    """While active, every forward of `model` that runs on `cache` and returns attentions returns them in sequence
    order (see the module docstring). Other forwards (other caches, other threads' runs) are left alone."""

    def reorder(module, args, kwargs, output):
        attentions = getattr(output, "attentions", None)
        if not attentions or passed_cache(kwargs) is not cache or cache.plan is None:
            return None
        orders: dict[int, torch.Tensor] = {}  # per group (one per attention type of a hybrid model)

        def order_of(index: int) -> torch.Tensor:
            layer = cache.layers[index]
            group = layer.group if isinstance(layer, BoundedLayer) else cache.groups[0]
            if id(group) not in orders:
                orders[id(group)] = group.policy.key_order(group.plan)
            return orders[id(group)]

        output.attentions = tuple(
            None if layer is None else in_sequence_order(layer, order_of(index))
            for index, layer in enumerate(attentions)
        )
        return output

    # Never traced: under a compiled decoding forward dynamo would compile the hook as a frame of its own, whose guards
    # are checked at every step (a step that returns no attentions has nothing for it to do).
    handle = model.register_forward_hook(torch.compiler.disable(reorder), with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
