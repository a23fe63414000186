"""One forward's program for the layers of a group: what to write where, and what to return.

A policy (`core.policy`) computes a `StepPlan` once per forward for all the layers of a group; the layers
(`core.layers`) only carry it out, and the mask builders (`hf.masks`) turn its visibility into the mask format of
an attention implementation. Slots are counted within the ring (see `core.ring`); sink slots come before it.

The keys a layer returns, in order:
- a decode step (one new token): the sink slots, then the first `returned` ring slots (the slots written so far;
  with `fixed_shapes`, every allocated slot, the unwritten ones masked), the new token written into `ring_slot`;
- a multi-token forward (a prefill, a prefill chunk, new text after a returned cache): `sink_copies` copies of the
  sinks (with `per_query_sinks`, one per query among the last `sink_copies` queries), then the kept past (`past_slots`, oldest first), then the new tokens; or, when `model_mask` is set, the new
  tokens alone.

The host-side fields (ints, bools) are what the eager code and the tests read; a layer writing under
`torch.compile` reads only the plan's tensors and the fields that stay constant from step to step (a changing int
read inside a compiled forward is a guard that fails at the next step: a recompile), so the slot a decode step writes
is also given as a tensor, `write_index`. `on(device)` gives the plan's tensors on another device, for the layers of
a model split across devices.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

#: the plan fields that hold tensors a layer reads (moved to each layer's device by `StepPlan.on`)
LAYER_TENSORS = ("write_index", "past_slots", "ring_source", "ring_target", "sink_fill", "sink_source", "sink_shift")


@dataclass(eq=False)
class StepPlan:
    start: int  # column of the first new token
    num_new: int
    decode: bool  # one new token: written in place, a prefix of the buffer returned
    capacity: int  # ring slots every layer of the group must hold after this step
    positions: torch.Tensor  # [B, num_new] position ids of the new tokens
    allowed: torch.Tensor | None  # [B, num_new, keys]: which returned key each query reads (None: `model_mask`)
    visible: int = 0  # decode: ring slots written so far (the ones a query may read)
    returned: int = 0  # decode: ring slots returned (`visible`, or every allocated slot with `fixed_shapes`)
    ring_slot: int = -1  # decode: the ring slot the new token overwrites
    write_index: torch.Tensor | None = None  # decode: [1] that slot in the layer's buffer (sinks + ring slot)
    past_slots: torch.Tensor | None = None  # multi-token: ring slots of the kept past, oldest first
    ring_source: torch.Tensor | None = None  # multi-token: which new tokens are kept in the ring ...
    ring_target: torch.Tensor | None = None  # ... and the ring slots they go to
    sink_fill: torch.Tensor | None = None  # [B, S] sink slots that one of the new tokens becomes
    sink_source: torch.Tensor | None = None  # [B, S] index (among the new tokens) of that token
    sink_copies: int = 1  # multi-token: copies of the sinks in front of the kept past
    #: multi-token with RoPE sinks, windowed: the copies are the last `sink_copies` queries' own, one each, in order
    per_query_sinks: bool = False
    #: [B, copies * S] how many positions each returned sink copy is moved (RoPE sinks); None: sinks keep theirs
    sink_shift: torch.Tensor | None = None
    #: rotary kind -> (cos, sin) of `sink_shift`, filled by the cache for each rotary of the group's layers (a decode
    #: step of a cache that may be compiled: by whoever rotates, `LayerGroup.rotation`)
    rotations: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    #: a decode step whose sink slots the cache has already rotated for every layer (`LayerGroup.rotate_sinks`)
    sinks_rotated: bool = False
    #: `allowed` is all-true (a decode step that reads every slot): mask builders may reuse a converted mask
    reads_every_key: bool = False
    #: the run compiles its decoding forward: masks must keep one shape and one layout from step to step
    fixed_shapes: bool = False
    #: the model builds its own mask from the 2D padding mask: the first forward of a run, with nothing cached and
    #: nothing cut, is plain causal attention over the new tokens (returned as they came), so a long prompt costs
    #: what it costs without a limit (no [B, T, T] visibility is ever built)
    model_mask: bool = False
    #: where mask builders keep what they can reuse across steps (the group's `RowState.memo`)
    memo: dict = field(default_factory=dict)
    #: device -> this plan with its layer tensors on that device (`on`)
    by_device: dict = field(default_factory=dict, repr=False)

    @property
    def device(self) -> torch.device:
        """Where the plan's tensors live: the device of the inputs (and of the rows' bookkeeping)."""
        return self.positions.device

    def on(self, device: torch.device) -> StepPlan:
        """This plan with the tensors a layer reads on `device` (the plan itself when they are there already): the
        layers of a model split across devices each read their own copy, made once per step and device."""
        if device == self.device:
            return self
        moved = self.by_device.get(device)
        if moved is None:
            tensors = {name: getattr(self, name) for name in LAYER_TENSORS}
            moved_tensors = {
                name: None if t is None else t.to(device, non_blocking=True) for name, t in tensors.items()
            }
            rotations = {
                kind: tuple(t.to(device, non_blocking=True) for t in pair) for kind, pair in self.rotations.items()
            }
            moved = self.by_device[device] = dataclasses.replace(
                self, **moved_tensors, rotations=rotations, by_device={}
            )
        return moved
