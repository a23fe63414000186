"""`BoundedCache`: a transformers `Cache` whose layers never hold more than `limit` positions.

Like transformers' own caches (`DynamicCache(config=...)` builds each layer from its layer type), a bounded cache is
made of one layer per decoder layer, chosen by that layer's type: a `BoundedLayer` (`core.layers`) for an attention
layer, transformers' own layer for one the bound leaves alone (a linear-attention state, a layer that reads another
layer's keys). Bounded layers come in *groups*: the layers of one attention type (full, or sliding with its window)
share one policy (`core.policy`), so each forward is planned once per group (`core.plan`), and the model gets one mask
per group. Which layers, groups, windows and rotaries a model has is read by the integration (`hf.layout`), which
*fits* the cache to a model; a cache built by hand (`BoundedCache(limit, sinks)`) is fitted by the first `generate`
that uses it. Placement and growth in the ring: `core.ring`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache

from .layers import BoundedLayer
from .plan import StepPlan
from .policy import Policy
from .rotary import RotaryShift
from .rows import RowState
from .window import WindowPolicy

UNFITTED = (
    "BoundedCache was used in a forward before it was fitted to a model; run it through "
    "`model.generate(..., cache_limit=...)` on a model patched with `cachelimit.patch()`, or build it with "
    "`BoundedCache.from_model(model, ...)`."
)


@dataclass(eq=False)
class LayerGroup:
    """The bounded layers that share one policy, and so one plan per forward. `name` is the attention type they
    serve (the key of the group's mask); `rotaries` moves the sink keys of its RoPE layers, by rotary kind."""

    name: str
    policy: Policy
    rotaries: dict[str, RotaryShift] = field(default_factory=dict)
    rows: RowState | None = None
    plan: StepPlan | None = None

    @property
    def rotates_sinks(self) -> bool:
        return bool(self.rotaries) and self.policy.num_sinks > 0

    def begin_step(self, new_real: torch.Tensor, model_mask: bool) -> StepPlan:
        if self.rows is None:
            self.rows = self.policy.new_rows(new_real.shape[0], new_real.device)
        plan = self.policy.plan(self.rows, new_real, model_mask=model_mask, rotates_sinks=self.rotates_sinks)
        if plan.sink_shift is not None:  # one rotation per rotary kind, shared by the group's layers
            plan.rotations = {kind: rotary.cos_sin(plan.sink_shift) for kind, rotary in self.rotaries.items()}
        self.plan = plan
        return plan

    def reset(self) -> None:
        self.rows = self.plan = None


class BoundedCache(Cache):
    """A cache that keeps at most `limit` positions per layer and row, `num_sink_tokens` of them pinned to each row's
    first real tokens. Drive it through `generate(..., cache_limit=...)` on a model patched with `cachelimit.patch`;
    every forward is announced with `begin_step`. `policy` is the run's limit and sinks (a group of sliding layers may
    keep fewer: its own policy); `window_prefill` makes a chunked prefill obey the window."""

    def __init__(self, limit: int, num_sink_tokens: int = 0, *, window_prefill: bool = False):
        self.policy = WindowPolicy(limit, num_sink_tokens, window_prefill)
        self.groups: list[LayerGroup] = []
        self.owner: weakref.ref | None = None  # the model it was fitted to (see `fit`)
        #: the layer types whose layers the bound leaves alone and that take a mask of their own (recurrent layers:
        #: transformers makes theirs from the 2D padding mask)
        self.recurrent_kinds: tuple[str, ...] = ()
        self._rotates_sinks = False
        super().__init__(layers=[])

    @classmethod
    def from_model(
        cls, model, cache_limit: int, num_sink_tokens: int = 0, *, window_prefill: bool = False
    ) -> BoundedCache:
        """The cache `generate(..., cache_limit=L, num_sink_tokens=S)` would build for `model`, fitted to it: each
        layer type's native window applies (min(L, W - 1) positions kept) and RoPE sinks move with the model's own
        rotary. The model must be patched (`cachelimit.patch()` gives its class the method that describes it)."""
        build = getattr(model, "_cachelimit_bounded_cache", None)
        if build is None:
            raise ValueError(f"{type(model).__name__} is not patched; call cachelimit.patch() first.")
        return build(cache_limit, num_sink_tokens, window_prefill=window_prefill)

    @property
    def fitted(self) -> bool:
        return bool(self.groups)

    def fit(self, model, groups: list[LayerGroup], layers: list, recurrent_kinds: tuple[str, ...] = ()) -> None:
        """Give the cache `model`'s layers (a `BoundedLayer` of one of `groups` per attention layer, transformers'
        own layer object for any other: `recurrent_kinds` are their layer types that take a mask) and record the
        model: its keys are that model's, so it continues only there (`check_owner`). Only a weak reference: a cache
        never keeps a model alive."""
        self.groups, self.layers, self.recurrent_kinds = groups, layers, recurrent_kinds
        self.owner = weakref.ref(model)
        self._rotates_sinks = any(group.rotates_sinks for group in groups)

    def check_owner(self, model) -> None:
        """Refuse (ValueError) a model other than the one this cache was fitted to: other weights give other keys
        for the same tokens, other shapes fail inside the forward."""
        owner = None if self.owner is None else self.owner()
        if owner is model:
            return
        if owner is None:
            raise ValueError(
                "`past_key_values` was built for or filled by another model, which no longer exists: continue a "
                "cache only on the model that filled it (or start a new generation)."
            )
        raise ValueError(
            f"`past_key_values` was built for or filled by another model ({type(owner).__name__} at {id(owner):#x}), "
            f"not this {type(model).__name__} at {id(model):#x}: continue a cache only on the model that filled it "
            "(its keys and values are that model's)."
        )

    @property
    def bounded_layers(self) -> list[BoundedLayer]:
        return [layer for layer in self.layers if isinstance(layer, BoundedLayer)]

    @property
    def cursor(self) -> int | None:
        """Columns every group has planned (None before the first forward)."""
        rows = self.groups[0].rows if self.groups else None
        return None if rows is None else rows.cursor

    @property
    def rotates_sinks(self) -> bool:
        """Whether any layer moves its sink keys to StreamingLLM positions (RoPE layers of a run with sinks)."""
        return self._rotates_sinks

    @property
    def batch_size(self) -> int | None:
        rows = self.groups[0].rows if self.groups else None
        return None if rows is None else rows.batch

    def set_window_prefill(self, window_prefill: bool) -> None:
        """Choose how the next multi-token forwards read the past (chunked prefill: windowed)."""
        self.policy = self.policy.with_window_prefill(window_prefill)
        for group in self.groups:
            group.policy = group.policy.with_window_prefill(window_prefill)

    def begin_step(self, new_real: torch.Tensor) -> StepPlan:
        """Plan the next forward over `new_real.shape[1]` tokens (bool, False for pads) for every group; returns the
        first group's plan (its positions are every group's). The model builds every group's mask from one 2D mask
        when it masks a forward itself, so all groups decide that alike."""
        if not self.groups:
            raise RuntimeError(UNFITTED)
        rows = self.groups[0].rows
        if rows is not None and rows.batch != new_real.shape[0]:
            raise ValueError(
                f"`past_key_values` holds {rows.batch} rows but the inputs have {new_real.shape[0]}: continue a "
                "returned cache with the same batch (num_beams and num_return_sequences multiply the rows; expand "
                "the cache with `batch_repeat_interleave`)."
            )
        cursor, num_new = (0 if rows is None else rows.cursor), new_real.shape[1]
        model_mask = num_new > 1 and all(
            group.policy.first_forward_is_causal(cursor, num_new) for group in self.groups
        )
        new_real = new_real.bool()
        plans = [group.begin_step(new_real, model_mask) for group in self.groups]
        return plans[0]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if not self.groups:  # a hand-built cache used outside a bounded `generate`
            raise RuntimeError(UNFITTED)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    @property
    def plan(self) -> StepPlan | None:
        return self.groups[0].plan if self.groups else None

    def plans_by_type(self) -> dict[str, StepPlan]:
        """The step's plan of each attention type: the model gets one mask per type (groups of one type alike)."""
        return {group.name: group.plan for group in self.groups}

    def _rows_follow(self, index: torch.Tensor) -> None:
        for group in self.groups:
            if group.rows is not None:
                group.rows.select_rows(index)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._rows_follow(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._rows_follow(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.batch_size is not None:
            rows = torch.arange(self.batch_size, device=self.groups[0].rows.num_real.device)
            self._rows_follow(rows.repeat_interleave(repeats))

    def reset(self) -> None:
        super().reset()
        for group in self.groups:
            group.reset()

    def kept_lengths_by_type(self) -> dict[str, torch.Tensor]:
        """Real positions each row keeps for the next token, per attention type."""
        return {group.name: group.policy.kept_lengths(group.rows) for group in self.groups if group.rows is not None}

    def kept_lengths(self) -> torch.Tensor:
        """Real positions each row keeps for the next token (sinks + recent window), in the group that keeps the
        most: at most `limit`."""
        kept = list(self.kept_lengths_by_type().values())
        return torch.stack(kept).amax(0) if kept else torch.zeros(0, dtype=torch.long)

    def kv_bytes(self) -> int:
        """Bytes of key/value storage allocated by all layers right now (the un-rotated sink keys of RoPE layers
        included): it grows with the tokens kept until the ring is full, then stays constant (see `kv_bytes`)."""
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
