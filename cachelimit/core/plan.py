"""One forward's program for the layers of a group: what to write where, and what to return.

A policy (`core.policy`) computes a `StepPlan` once per forward for all the layers of a group; the layers
(`core.layers`) only carry it out, and the mask builders (`hf.masks`) turn its visibility into the mask format of
an attention implementation. Slots are counted within the ring (see `core.ring`); sink slots come before it.

The keys a layer returns, in order:
- a decode step (one new token): the sink slots, then the first `visible` ring slots (all of them once the ring has
  wrapped), the new token written into `ring_slot`;
- a multi-token forward (a prefill, a prefill chunk, new text after a returned cache): `sink_copies` copies of the
  sinks, then the kept past (`past_slots`, oldest first), then the new tokens; or, when `model_mask` is set, the new
  tokens alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepPlan:
    start: int  # column of the first new token
    num_new: int
    decode: bool  # one new token: written in place, a prefix of the buffer returned
    capacity: int  # ring slots every layer of the group must hold after this step
    positions: torch.Tensor  # [B, num_new] position ids of the new tokens
    allowed: torch.Tensor | None  # [B, num_new, keys]: which returned key each query reads (None: `model_mask`)
    visible: int = 0  # decode: ring slots returned (those written so far)
    ring_slot: int = -1  # decode: the ring slot the new token overwrites
    past_slots: torch.Tensor | None = None  # multi-token: ring slots of the kept past, oldest first
    ring_source: torch.Tensor | None = None  # multi-token: which new tokens are kept in the ring ...
    ring_target: torch.Tensor | None = None  # ... and the ring slots they go to
    sink_fill: torch.Tensor | None = None  # [B, S] sink slots that one of the new tokens becomes
    sink_source: torch.Tensor | None = None  # [B, S] index (among the new tokens) of that token
    sink_copies: int = 1  # multi-token: copies of the sinks in front of the kept past
    #: [B, copies * S] how many positions each returned sink copy is moved (RoPE sinks); None: sinks keep theirs
    sink_shift: torch.Tensor | None = None
    #: rotary kind -> (cos, sin) of `sink_shift`, filled by the cache for each rotary of the group's layers
    rotations: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    #: `allowed` is all-true (a decode step that reads every slot): mask builders may reuse a converted mask
    reads_every_key: bool = False
    #: the model builds its own mask from the 2D padding mask: the first forward of a run, with nothing cached and
    #: nothing cut, is plain causal attention over the new tokens (returned as they came), so a long prompt costs
    #: what it costs without a limit (no [B, T, T] visibility is ever built)
    model_mask: bool = False
    #: where mask builders keep what they can reuse across steps (the group's `RowState.memo`)
    memo: dict = field(default_factory=dict)
