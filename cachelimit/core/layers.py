"""`BoundedLayer`: one decoder layer's keys and values, a slot store that carries out its group's plans.

The layer holds one buffer of sink slots followed by the ring (`core.ring`), plus, for RoPE layers with sinks, the
sink keys as written (un-rotated: the returned copies are rotated from them each step, so no error accumulates; for a
layer whose positions live in its values, MLA's latent cache, the sink values: `RotaryShift.rotates`). It
decides nothing: which slot a token lands in, what is returned and how sinks move come from the plan its group's
policy computed for this forward (`core.plan`), the same for every layer of the group. It names its group only by
what it reads of it (`LayerOwner`), so that of the two, only the group, which builds and drives its layers, imports
the other.

Under `torch.compile` a decode step's update is a tensor-indexed write and a return of buffers whose shape does not
change from step to step (`StepPlan.returned`); the checks and counters that read or change ints are left to the
eager code around the compiled forward (`BoundedCache.settle`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from transformers.cache_utils import CacheLayerMixin

from .memory import fixed_address
from .plan import StepPlan

if TYPE_CHECKING:
    from .policy import Policy
    from .rotary import RotaryShift
    from .rows import RowState


class LayerOwner(Protocol):
    """What a layer reads of the group it belongs to (`core.group.LayerGroup`): its policy, its bookkeeping, the plan
    of the forward under way, and the sink rotations it shares among its layers."""

    layers: list[BoundedLayer]
    policy: Policy
    rows: RowState | None
    plan: StepPlan | None

    def rotate_sinks(self, plan: StepPlan) -> bool: ...

    def rotation(self, plan: StepPlan, kind: str) -> tuple[torch.Tensor, torch.Tensor]: ...


def contiguous_states(key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The new keys and values, contiguous, for a first forward that reads exactly them. A model hands them over as
    views (Llama's values are a transpose of the projection), which the unbounded cache copies into its own tensors;
    SDPA's CPU kernel reads a strided view more slowly than that copy costs (bfloat16, 4k tokens: about 3 %)."""
    return key_states.contiguous(), value_states.contiguous()


class BoundedLayer(CacheLayerMixin):
    """One layer of a `BoundedCache`; `rotary` (with `rotary_kind`, its key in `StepPlan.rotations`) moves its sink
    keys, None for a layer whose keys carry no positions (learned positions, NoPE layers)."""

    is_sliding = True

    def __init__(self, group: LayerOwner, rotary: RotaryShift | None = None, rotary_kind: str = ""):
        super().__init__()
        self.group, self.rotary, self.rotary_kind = group, rotary, rotary_kind
        self.rotated = rotary.rotates if rotary is not None else "keys"  # the tensor whose sinks are moved
        self.cumulative_length = 0  # columns this layer has stored: a forward the cache did not plan is refused
        self.compiled_plan: StepPlan | None = None  # the plan a compiled forward carried out (`BoundedCache.settle`)
        self.sink_keys: torch.Tensor | None = None
        self.device = None
        group.layers.append(self)

    @property
    def num_sinks(self) -> int:
        return self.group.policy.num_sinks

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate the sink slots and an empty ring; `reserve` sizes the ring for what each plan needs."""
        batch, heads, _, key_dim = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(batch, heads, self.num_sinks, key_dim)
        self.values = value_states.new_zeros(batch, heads, self.num_sinks, value_states.shape[-1])
        if self.num_sinks and self.rotary is not None:
            moved = key_states if self.rotated == "keys" else value_states
            self.sink_keys = moved.new_zeros(*moved.shape[:2], self.num_sinks, moved.shape[-1])
            fixed_address(self.sink_keys)
        fixed_address(self.keys, self.values)
        self.is_initialized = True

    def reserve(self, capacity: int) -> None:
        """Grow the buffers to hold `capacity` ring slots: the allocated prefix is copied as is, so no column changes
        slot (`core.ring`). New slots are zeros (finite under a mask, unlike empty memory). The group grows every
        initialized layer before the forward (`LayerGroup.begin_step`); a layer initialized by this forward grows
        itself."""
        slots, held = self.num_sinks + capacity, self.keys.shape[-2]
        if held >= slots:
            return
        for name in ("keys", "values"):
            old = getattr(self, name)
            grown = old.new_zeros(*old.shape[:2], slots, old.shape[-1])
            grown[:, :, :held] = old
            setattr(self, name, grown)
        fixed_address(self.keys, self.values)

    def _plan(self, num_new: int) -> StepPlan:
        plan = self.group.plan
        if plan is None or plan.start != self.cumulative_length or plan.num_new != num_new:
            raise RuntimeError(
                "BoundedCache was used in a forward that was not announced with `begin_step`; run it through "
                "`model.generate(..., cache_limit=...)` on a model patched with `cachelimit.patch()`."
            )
        return plan

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if torch.compiler.is_compiling():
            # Inside a compiled forward: no int is read that changes from step to step (each would be a guard, a
            # recompile at the next step); the plan this layer carried out is recorded, and counted by the cache
            # outside the graph (`BoundedCache.settle`). The plan was announced by `begin_step`, before the forward.
            plan = self.group.plan
            keys, values = self._write(plan, key_states, value_states)
            self.compiled_plan = plan
            return keys, values
        plan = self._plan(key_states.shape[-2])
        keys, values = self._write(plan, key_states, value_states)
        self.cumulative_length += plan.num_new
        return keys, values

    def _write(self, plan: StepPlan, key_states: torch.Tensor, value_states: torch.Tensor):
        """Carry out `plan`: write the new keys and values where it says, return the keys and values it names."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.reserve(plan.capacity)
        sinks = self.num_sinks
        plan = plan.on(self.device)
        if plan.sink_fill is not None:
            self._fill_sinks(plan, key_states, value_states)
        if plan.decode:
            self.keys.index_copy_(2, plan.write_index, key_states)
            self.values.index_copy_(2, plan.write_index, value_states)
            if plan.sink_shift is not None and self.rotary is not None and not self.group.plan.sinks_rotated:
                self._rotate_sinks(plan)
            keys, values = self.keys, self.values
            if keys.shape[-2] != sinks + plan.returned:  # only the slots written so far (a growing ring)
                keys, values = keys[:, :, : sinks + plan.returned], values[:, :, : sinks + plan.returned]
        else:
            if plan.model_mask:  # the first forward, nothing cut: the new tokens attend to each other only
                keys, values = contiguous_states(key_states, value_states)
            else:
                keys, values = self._gather(plan, key_states, value_states)
            target = sinks + plan.ring_target
            self.keys.index_copy_(2, target, key_states.index_select(2, plan.ring_source))
            self.values.index_copy_(2, target, value_states.index_select(2, plan.ring_source))
        return keys, values

    def _rotate_sinks(self, plan: StepPlan) -> None:
        """Move this layer's sinks to a decode step's positions when the cache has not (`LayerGroup.begin_step`):
        inside a compiled forward, from its own cos/sin (a few fused kernels in the graph, where an eager rotation
        before the forward costs some 50 ops a step); in an eager one, every layer of the group at once, or, while
        a layer is not initialized, each its own."""
        if torch.compiler.is_compiling():
            cos, sin = self.rotary.cos_sin(plan.sink_shift)
        elif self.group.rotate_sinks(self.group.plan):
            return
        else:
            cos, sin = self.group.rotation(plan, self.rotary_kind)
        getattr(self, self.rotated)[:, :, : self.num_sinks] = self.rotary.apply(self.sink_keys, cos, sin)

    def _fill_sinks(self, plan: StepPlan, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Copy each row's first real tokens into its sink slots (per row: left pads differ by row)."""
        sinks = self.num_sinks
        fill = plan.sink_fill[:, None, :, None]
        for name, states in (("keys", key_states), ("values", value_states)):
            moved_here = self.sink_keys is not None and name == self.rotated
            target = self.sink_keys if moved_here else getattr(self, name)[:, :, :sinks]
            index = plan.sink_source[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[-1])
            target.copy_(torch.where(fill, states.gather(2, index), target))

    def _gather(self, plan: StepPlan, key_states: torch.Tensor, value_states: torch.Tensor):
        """A multi-token forward reads [sink copies | kept past, oldest first | new tokens] (`core.plan`)."""
        sinks = self.num_sinks
        past = sinks + plan.past_slots
        gathered = []
        for name, states in (("keys", key_states), ("values", value_states)):
            stored = getattr(self, name)
            parts = [stored.index_select(2, past), states]
            if sinks and name == self.rotated and plan.sink_shift is not None and self.rotary is not None:
                copies = self.sink_keys.repeat(1, 1, plan.sink_copies, 1)
                parts.insert(0, self.rotary.apply(copies, *plan.rotations[self.rotary_kind]))
            elif sinks:
                parts.insert(0, stored[:, :, :sinks].repeat(1, 1, plan.sink_copies, 1))
            gathered.append(torch.cat(parts, dim=-2))
        return gathered[0], gathered[1]

    def get_mask_sizes(self, query_length) -> tuple[int, int]:
        # Masks for this cache are built before the forward (slots are not in column order), except for a first
        # forward the model masks itself (`StepPlan.model_mask`): it then reads exactly the new tokens.
        plan = self.group.plan
        if plan is not None and plan.model_mask:
            return plan.num_new, 0
        return (self.keys.shape[-2] if self.is_initialized else 0), 0

    def get_seq_length(self) -> int:
        """Columns seen so far (pads included), as `generate` expects when it resumes from a cache."""
        return self.cumulative_length

    def get_max_length(self) -> int:
        """The most slots this layer will ever hold (sinks + the full ring); it allocates them only as needed."""
        return self.group.policy.slots

    def get_max_cache_shape(self) -> int:  # abstract in some transformers releases' CacheLayerMixin
        return self.get_max_length()

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
        self.compiled_plan = None
