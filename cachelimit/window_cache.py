"""`BoundedCache`: a transformers `Cache` whose layers never hold more than `limit` positions.

Each layer is one buffer of `sinks` slots followed by a ring of at most `(limit - sinks) + 1` slots, written in
place: a decode step writes the new key/value into the ring slot of the token that just left the window and
returns the buffer as is. Attention does not care in which slot a key sits, only what the mask allows, so nothing
is ever shifted, rolled or concatenated while decoding (transformers' own sliding-window layers copy the window
every step).

A large limit is a cap, not a preallocation: the ring is allocated for what it holds and grown geometrically
(each growth at least doubles it, so copies are amortised O(1) per token) until it reaches its full size, and a
decode step returns only the slots written so far. Column `c` lives in ring slot `c % R` throughout (while the
ring is smaller than `R`, `c < R`, so that is slot `c`): growing never moves a token to another slot. Which slot
holds what, and how large the ring must be, is planned once per step for all layers (see `step_plan`).
"""

from __future__ import annotations

import weakref
from functools import partial

import torch
from transformers.cache_utils import Cache

from . import compat
from .compat import CacheLayer
from .policy import WindowPolicy
from .step_plan import RowState, StepPlan, plan_step
from .utils.validation import check_window


class BoundedLayer(CacheLayer):
    """One layer of a `BoundedCache`; all bookkeeping lives in the parent cache's current `StepPlan`."""

    is_sliding = True

    def __init__(self, cache: BoundedCache):
        super().__init__()
        self.cache = cache
        self.cumulative_length = 0
        self.sink_keys: torch.Tensor | None = None  # un-shifted sink keys (RoPE only), re-rotated each step

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate the sink slots and an empty ring; `_reserve` sizes the ring for what it must hold."""
        policy = self.cache.policy
        batch, heads, _, key_dim = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(batch, heads, policy.num_sinks, key_dim)
        self.values = value_states.new_zeros(batch, heads, policy.num_sinks, value_states.shape[-1])
        if policy.num_sinks and self.cache.rotary is not None:
            self.sink_keys = key_states.new_zeros(batch, heads, policy.num_sinks, key_dim)
        self.is_initialized = True

    def _reserve(self, capacity: int) -> None:
        """Grow the buffers to `sinks + capacity` slots (the plan grows capacity geometrically). The allocated prefix
        is copied as is: no column changes slot. New slots are zeros (finite under a mask, unlike empty memory)."""
        slots = self.cache.policy.num_sinks + capacity
        held = self.keys.shape[-2]
        if held >= slots:
            return
        for name in ("keys", "values"):
            old = getattr(self, name)
            grown = old.new_zeros(*old.shape[:2], slots, old.shape[-1])
            grown[:, :, :held] = old
            setattr(self, name, grown)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        plan = self.cache.plan_for(self.cumulative_length, key_states.shape[-2])
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._reserve(plan.capacity)
        sinks = self.cache.policy.num_sinks
        if plan.sink_fill is not None:
            self._fill_sinks(plan, key_states, value_states)
        if plan.decode:
            slot = sinks + plan.ring_slot
            self.keys[:, :, slot] = key_states[:, :, 0]
            self.values[:, :, slot] = value_states[:, :, 0]
            if plan.sink_cos is not None:
                self.keys[:, :, :sinks] = self.cache.rotary.apply(self.sink_keys, plan.sink_cos, plan.sink_sin)
            keys, values = self.keys, self.values
            if keys.shape[-2] != sinks + plan.visible:  # the ring is not full yet: only the slots written so far
                keys, values = keys[:, :, : sinks + plan.visible], values[:, :, : sinks + plan.visible]
        else:
            if plan.model_mask:  # the first forward, nothing cut: the new tokens attend to each other only
                keys, values = key_states, value_states
            else:
                keys, values = self._gather_for_prefill(plan, key_states, value_states)
            target = sinks + plan.ring_target
            self.keys.index_copy_(2, target, key_states.index_select(2, plan.ring_source))
            self.values.index_copy_(2, target, value_states.index_select(2, plan.ring_source))
        self.cumulative_length += plan.num_new
        return keys, values

    def _fill_sinks(self, plan: StepPlan, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Copy each row's first real tokens into its sink slots (per row: left pads differ by row)."""
        sinks = self.cache.policy.num_sinks
        fill = plan.sink_fill[:, None, :, None]
        for states, target in (
            (key_states, self.sink_keys if self.sink_keys is not None else self.keys[:, :, :sinks]),
            (value_states, self.values[:, :, :sinks]),
        ):
            index = plan.sink_source[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[-1])
            target.copy_(torch.where(fill, states.gather(2, index), target))

    def _gather_for_prefill(self, plan: StepPlan, key_states: torch.Tensor, value_states: torch.Tensor):
        """Multi-token forward: [sink copies | kept past, oldest first | new tokens] (the plan's key order)."""
        sinks = self.cache.policy.num_sinks
        past = sinks + plan.past_slots
        key_parts = [self.keys.index_select(2, past), key_states]
        value_parts = [self.values.index_select(2, past), value_states]
        if sinks:
            sink_values = self.values[:, :, :sinks].repeat(1, 1, plan.sink_copies, 1)
            if plan.sink_cos is not None:
                sink_keys = self.sink_keys.repeat(1, 1, plan.sink_copies, 1)
                sink_keys = self.cache.rotary.apply(sink_keys, plan.sink_cos, plan.sink_sin)
            else:
                sink_keys = self.keys[:, :, :sinks].repeat(1, 1, plan.sink_copies, 1)
            key_parts.insert(0, sink_keys)
            value_parts.insert(0, sink_values)
        return torch.cat(key_parts, dim=-2), torch.cat(value_parts, dim=-2)

    def get_mask_sizes(self, query_length) -> tuple[int, int]:
        # Masks for this cache are built by `cachelimit` before the forward (slots are not in column order), except
        # for a first forward the model masks itself (`StepPlan.model_mask`): then it reads exactly the new tokens.
        plan = self.cache.plan
        if plan is not None and plan.model_mask:
            return compat.query_length(query_length), 0
        return (self.keys.shape[-2] if self.is_initialized else 0), 0

    def get_seq_length(self) -> int:
        """Columns seen so far (pads included), as `generate` expects when it resumes from a cache."""
        return self.cumulative_length

    def get_max_length(self) -> int:
        """The most slots this layer will ever hold (sinks + the full ring); it allocates them only as needed."""
        return self.cache.policy.slots

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            for name in ("keys", "values", "sink_keys"):
                if (tensor := getattr(self, name)) is not None:
                    setattr(self, name, tensor.index_select(0, indices.to(tensor.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            for name in ("keys", "values", "sink_keys"):
                if (tensor := getattr(self, name)) is not None:
                    setattr(self, name, tensor.repeat_interleave(repeats, dim=0))

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("A bounded cache forgets evicted tokens: it cannot be cropped or rolled back.")

    def reset(self) -> None:
        """Drop the buffers (like transformers' dynamic layers): the next forward allocates what it needs."""
        self.keys = self.values = self.sink_keys = None
        self.is_initialized = False
        self.cumulative_length = 0


class BoundedCache(Cache):
    """A cache that keeps at most `limit` positions per layer and row (optionally `num_sink_tokens` of them
    pinned to each row's first real tokens). Drive it through `generate(..., cache_limit=...)` on a model
    patched with `cachelimit.patch`; every forward must be announced with `begin_step`.

    `rotary` (RoPE models with sinks) moves sink keys to their StreamingLLM positions; see `utils.rotary`.
    """

    def __init__(
        self,
        limit: int,
        num_sink_tokens: int = 0,
        *,
        window_prefill: bool = False,
        native_window: int | None = None,
        rotary=None,
    ):
        self.policy = WindowPolicy(limit, num_sink_tokens, window_prefill, native_window)
        self.rotary = rotary if num_sink_tokens else None
        #: one sink copy per query in a windowed multi-token forward (None: when `rotary` moves the sinks)
        self.per_query_sinks: bool | None = None
        #: whether the next forward's mask is the model's own (None: `step_plan.first_forward_is_causal` decides)
        self.model_mask: bool | None = None
        self.state: RowState | None = None
        self.plan: StepPlan | None = None
        self.owner: weakref.ref | None = None  # the model it was built for or first filled by (see `bind`)
        super().__init__(layer_class_to_replicate=partial(BoundedLayer, self))

    #: builds the cache of a given model: `cachelimit.layered_cache.bounded_cache_for`, registered by that module
    #: (it imports this one, so it cannot be imported here); a model whose layers differ needs its subclass
    model_cache_builder = None

    @classmethod
    def from_model(
        cls, model, cache_limit: int, num_sink_tokens: int = 0, *, window_prefill: bool = False
    ) -> BoundedCache:
        """The cache `generate(..., cache_limit=L, num_sink_tokens=S)` would build for `model`, for callers who
        build it themselves: each layer's native window is applied (min(L, W - 1) positions kept) and, for RoPE
        models with sinks, the model's own rotary moves the sink keys (a hand-built cache without it would drift).
        The rotary is found from the model (`utils.rotary`), not from the family registry, which sits above the
        cache core. Refuses what `generate` refuses; hybrid models get a `LayeredBoundedCache`."""
        limit, sinks = check_window(cache_limit, num_sink_tokens)
        return BoundedCache.model_cache_builder(model, limit, sinks, window_prefill=window_prefill)

    def bind(self, model) -> None:
        """Record the model this cache belongs to: its keys, values, rotary and window are that model's, so it may
        continue only there (`check_owner`). Only a weak reference: the cache never keeps a model alive."""
        self.owner = weakref.ref(model)

    def check_owner(self, model) -> None:
        """Refuse (ValueError) a model other than the one this cache was built for or filled by: other weights give
        other keys for the same tokens, other shapes fail inside the forward."""
        owner = None if self.owner is None else self.owner()
        if owner is model:
            return
        filled = "was built for or filled by"
        if owner is None:
            raise ValueError(
                f"`past_key_values` {filled} another model, which no longer exists: continue a cache only on the "
                "model that filled it (or start a new generation)."
            )
        raise ValueError(
            f"`past_key_values` {filled} another model ({type(owner).__name__} at {id(owner):#x}), not this "
            f"{type(model).__name__} at {id(model):#x}: continue a cache only on the model that filled it (its keys "
            "and values are that model's)."
        )

    def set_window_prefill(self, window_prefill: bool) -> None:
        """Choose how the next multi-token forwards read the past (chunked prefill: windowed)."""
        policy = self.policy
        self.policy = WindowPolicy(policy.limit, policy.num_sinks, window_prefill, policy.native_window)

    def begin_step(self, new_real: torch.Tensor) -> StepPlan:
        """Plan the next forward over `new_real.shape[1]` tokens (bool, False for pads) for every layer."""
        if self.state is None:
            self.state = RowState.empty(new_real.shape[0], self.policy, new_real.device)
        elif self.state.num_real.shape[0] != new_real.shape[0]:
            raise ValueError(
                f"`past_key_values` holds {self.state.num_real.shape[0]} rows but the inputs have "
                f"{new_real.shape[0]}: continue a returned cache with the same batch (num_beams and "
                "num_return_sequences multiply the rows; expand the cache with `batch_repeat_interleave`)."
            )
        self.plan = plan_step(
            self.state, self.policy, new_real.bool(), self.rotary, self.per_query_sinks, self.model_mask
        )
        return self.plan

    def plan_for(self, layer_length: int, num_new: int) -> StepPlan:
        plan = self.plan
        if plan is None or plan.start != layer_length or plan.num_new != num_new:
            raise RuntimeError(
                "BoundedCache was used in a forward that was not announced with `begin_step`; run it through "
                "`model.generate(..., cache_limit=...)` on a model patched with `cachelimit.patch()`."
            )
        return plan

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        if self.state is not None:
            self.state.select_rows(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.state is not None:
            self.state.select_rows(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.state is not None:
            rows = torch.arange(self.state.num_real.shape[0], device=self.state.num_real.device)
            self.state.select_rows(rows.repeat_interleave(repeats))

    def reset(self) -> None:
        super().reset()
        self.state = self.plan = None

    def kept_lengths(self) -> torch.Tensor:
        """Real positions each row keeps for the next token (sinks + recent window), at most `limit`."""
        if self.state is None:
            return torch.zeros(0, dtype=torch.long)
        state, policy = self.state, self.policy
        ring = policy.ring_size
        newest = state.cursor - 1
        slot_column = newest - (newest - torch.arange(state.capacity, device=state.ring_real.device)) % ring
        window_start = state.cursor - policy.recent
        in_window = state.ring_real & (slot_column >= window_start) & (slot_column >= 0)
        sinks = ((state.sink_column >= 0) & (state.sink_column < window_start)).sum(1)
        return in_window.sum(1) + sinks

    def kv_bytes(self) -> int:
        """Bytes of key/value storage allocated by all layers right now (the sink copies of RoPE models included):
        it grows with the tokens kept until the ring is full, then stays constant (see `kv_bytes`)."""
        return kv_bytes(self)


def kv_bytes(cache) -> int:
    """Bytes of key/value storage any transformers `Cache` holds right now: the storages behind every layer's
    keys, values and (cachelimit's RoPE sinks) un-rotated sink keys, each counted once and whole.

    The one counter behind `BoundedCache.kv_bytes`, the CLI's live figure and the benchmarks, so that they all
    measure the same thing: a sliced view counts the whole storage it keeps alive (as transformers'
    `DynamicSlidingWindowLayer` window does), which is what the process really holds.
    """
    storages: dict[int, int] = {}
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values", "sink_keys"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())
