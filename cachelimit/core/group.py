"""`LayerGroup`: the bounded layers of one attention type, which share one policy and so one plan per forward.

A hybrid model has one group per attention type (full layers, sliding layers with their window); each group plans
every forward once for all its layers (`core.plan`), gets one mask, and, for a decode step with RoPE sinks, moves
the sink keys of all its layers at once (`rotate_sinks`): before the forward, or, for a cache that may be compiled,
in the forward (each layer inside a compiled graph, all of them at the first layer of an eager one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .plan import StepPlan
from .policy import Policy
from .rotary import RotaryShift
from .rows import RowState

if TYPE_CHECKING:
    from .layers import BoundedLayer


@dataclass(eq=False)
class LayerGroup:
    """The bounded layers that share one policy, and so one plan per forward. `name` is the attention type they
    serve (the key of the group's mask); `rotaries` moves the sink keys of its RoPE layers, by rotary kind."""

    name: str
    policy: Policy
    rotaries: dict[str, RotaryShift] = field(default_factory=dict)
    rows: RowState | None = None
    plan: StepPlan | None = None
    layers: list[BoundedLayer] = field(default_factory=list)  # in model order (each layer adds itself)

    @property
    def rotates_sinks(self) -> bool:
        return bool(self.rotaries) and self.policy.num_sinks > 0

    def begin_step(
        self, new_real: torch.Tensor | None, model_mask: bool, *, batch: int, device, fixed_shapes: bool, static: bool
    ) -> StepPlan:
        """Plan the group's next forward (`BoundedCache.begin_step`), grow every layer's ring to the plan's capacity,
        rotate the sink keys of every layer for a decode step (`rotate_sinks`; left to the forward for a cache that
        may be compiled) and put the plan's tensors on every device the layers are on: before the forward, so a
        compiled forward finds them done."""
        if self.rows is None:
            self.rows = self.policy.new_rows(batch, device)
            self.rows.preallocated = static
        self.rows.fixed_shapes = fixed_shapes
        plan = self.policy.plan(self.rows, new_real, model_mask=model_mask, rotates_sinks=self.rotates_sinks)
        for layer in self.layers:  # grown here, so that a compiled forward never reallocates
            if layer.is_initialized:
                layer.reserve(plan.capacity)
        if plan.sink_shift is not None and plan.decode and plan.fixed_shapes:
            # a decode step of a cache that may be compiled: the sinks are rotated in the forward, by each layer
            # inside a compiled graph (fused there, no op of its own: `BoundedLayer._rotate_sinks`), or all at once
            # by the first layer of an eager one
            for rotary in self.rotaries.values():
                rotary.prime(device)
        elif plan.sink_shift is not None:  # one rotation per rotary kind, shared by the group's layers
            plan.rotations = {kind: rotary.cos_sin(plan.sink_shift) for kind, rotary in self.rotaries.items()}
            if plan.decode:
                self.rotate_sinks(plan)
        for layer in self.layers:
            if layer.is_initialized and layer.device != plan.device:
                plan.on(layer.device)  # made here, so a compiled forward only reads it
        self.plan = plan
        return plan

    def rotate_sinks(self, plan: StepPlan) -> bool:
        """Move the sink keys of every RoPE layer to this decode step's StreamingLLM positions (before the forward,
        or, for a cache that may be compiled, in an eager forward's first layer): the un-rotated sink keys of all
        layers of one rotary kind (and device, dtype and shape) are rotated as one tensor (side by side in the batch
        dim), so a step makes one rotation per kind rather than one per layer, then copied into each layer's sink
        slots. False, nothing done, while a layer is not initialized (a first forward of one token): each layer then
        rotates its own."""
        stacks: dict[tuple, list[BoundedLayer]] = {}
        for layer in self.layers:
            if layer.rotary is None:
                continue
            if not layer.is_initialized:
                return False
            key = (layer.rotary_kind, layer.device, layer.dtype, tuple(layer.sink_keys.shape))
            stacks.setdefault(key, []).append(layer)
        sinks = self.policy.num_sinks
        for (kind, device, _, _), same in stacks.items():
            first = same[0]
            cos, sin = self.rotation(plan.on(device), kind)
            if len(same) == 1:
                rotated = [first.rotary.apply(first.sink_keys, cos, sin)]
            else:  # the layers side by side in the batch dim: every rotary takes [batch, heads, n, dim]
                stacked = torch.cat([layer.sink_keys for layer in same])
                repeat = (len(same),) + (1,) * (cos.dim() - 1)
                rotated = first.rotary.apply(stacked, cos.repeat(repeat), sin.repeat(repeat)).chunk(len(same))
            for layer, moved in zip(same, rotated, strict=True):
                getattr(layer, layer.rotated)[:, :, :sinks] = moved
        plan.sinks_rotated = True
        return True

    def rotation(self, plan: StepPlan, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The (cos, sin) of the plan's sink shift for one rotary kind, on the plan's device: made once per step and
        kept in the plan (eager code only: a compiled layer makes its own inside the graph)."""
        if kind not in plan.rotations:
            plan.rotations[kind] = self.rotaries[kind].cos_sin(plan.sink_shift)
        return plan.rotations[kind]

    def reset(self) -> None:
        self.rows = self.plan = None
