"""The cache layers of the decoder layers the bound leaves alone, and of those that are both (`hf.layer_types`).

A bounded cache has one layer per decoder layer, like transformers' own. For a layer with a recurrent state (linear
attention, SSM, short convolution) or with nothing to keep (a KV-sharing consumer), that is transformers' own layer
class for its cache layer type, built as transformers builds it (`cache_utils.DYNAMIC_LAYER_TYPE_MAPPING`), so the
model's own recurrent code runs on it unchanged and its state stays exactly what an unbounded run holds. A `hybrid`
layer (attention and a recurrent state in one decoder layer: Zamba 2, Falcon-H1) gets a `BoundedHybridLayer`: a
bounded attention layer that also carries transformers' recurrent state, as transformers' own
`LinearAttentionAndFullAttentionLayer` pairs a `DynamicLayer` with it.
"""

from __future__ import annotations

import types
from functools import cache

import torch
from transformers import cache_utils

from ..core.layers import BoundedLayer
from .compat import DUMMY_LAYER
from .layer_types import NOTHING, LayerKind


def own_layer(kind: LayerKind):
    """transformers' own cache layer for a decoder layer the bound leaves alone (None: the cache leaves it out, as
    releases without `DummyLayer` do for trailing KV-sharing layers). Of transformers' own class exactly (code that
    dispatches on `type(layer) is LinearAttentionLayer`, as transformers' own tests do, sees its own layer), able to
    follow a selection or repetition of the batch rows: transformers' recurrent layers only reorder them for beam
    search, and a returned cache can be expanded or sliced by the user."""
    if kind.state == NOTHING and DUMMY_LAYER is None:
        return None
    layer = cache_utils.DYNAMIC_LAYER_TYPE_MAPPING[kind.state](**kind.state_kwargs)
    if not hasattr(layer, "batch_select_indices"):
        layer.batch_select_indices = types.MethodType(select_states, layer)
        layer.batch_repeat_interleave = types.MethodType(repeat_states, layer)
    return layer


@cache
def hybrid_layer_class() -> type:
    """`BoundedLayer` + transformers' `LinearAttentionLayer` (5.14.0 on: `compat.RECURRENT_LAYERS`)."""
    linear = cache_utils.LinearAttentionLayer

    class BoundedHybridLayer(linear, BoundedLayer):
        """A bounded attention layer that also holds a decoder layer's recurrent state (transformers' own code)."""

        def __init__(self, group, rotary=None, rotary_kind: str = "", number_of_states: int = 1, **kwargs):
            BoundedLayer.__init__(self, group, rotary, rotary_kind)
            linear.__init__(self, number_of_states=number_of_states)

        def lazy_initialization(self, *args, **kwargs) -> None:
            # the attention part initialises with (keys, values), the recurrent part with keyword arguments
            if args:
                BoundedLayer.lazy_initialization(self, *args)
            else:
                linear.lazy_initialization(self, **kwargs)

        def reset(self) -> None:
            linear.reset(self)
            BoundedLayer.reset(self)

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.batch_select_indices(beam_idx)  # both parts, once each

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            select_states(self, indices)
            BoundedLayer.batch_select_indices(self, indices)

        def batch_repeat_interleave(self, repeats: int) -> None:
            repeat_states(self, repeats)
            BoundedLayer.batch_repeat_interleave(self, repeats)

        def crop(self, tokens_to_remove: int) -> None:
            BoundedLayer.crop(self, tokens_to_remove)

        def get_max_length(self) -> int:
            return BoundedLayer.get_max_length(self)

    return BoundedHybridLayer


def _states(layer):
    for states in (layer.conv_states, layer.recurrent_states):
        for index, state in states.items():
            if state is not None:
                yield states, index, state


def select_states(layer, indices: torch.Tensor) -> None:
    """Follow a selection of rows in a layer's recurrent states (transformers' linear layers only reorder)."""
    for states, index, state in list(_states(layer)):
        states[index] = state.index_select(0, indices.to(state.device))


def repeat_states(layer, repeats: int) -> None:
    for states, index, state in list(_states(layer)):
        states[index] = state.repeat_interleave(repeats, dim=0)
