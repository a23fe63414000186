"""What a bounded cache keeps, decided in one place: the policy.

A bounded layer is a slot store (`core.layers`): it writes the new keys and values into the slots a plan names and
returns the slots a plan names. Everything else (which tokens are kept, which slot a column lives in, which kept key
each query may read, the order in which attention maps show the keys, how many positions each row keeps) comes from
one policy object. The window with attention sinks (`core.window.WindowPolicy`) is the first policy; a second one is
added by implementing this protocol, without touching the layers, the cache, the applier or the command line.

What a new policy must provide:
- `limit`, `num_sinks`: what `generate` checks a continued cache against (the run's `cache_limit`,
  `num_sink_tokens`); `slots`: the most slots a layer ever holds (a cap: layers allocate only what plans ask for);
- `new_rows(batch, device)`: its per-row bookkeeping for a fresh run (`core.rows.RowState` or a richer object with
  `cursor`, `select_rows(index)` and `capacity`);
- `plan(rows, new_real, *, model_mask, per_query_sinks)`: one forward's `core.plan.StepPlan` over the new tokens
  (`new_real`: [B, n] bool, False for pads), advancing `rows` past them;
- `first_forward_is_causal(cursor, num_new)`: whether a forward reads exactly what plain causal attention over its
  own tokens reads (the model may then build its own mask, `StepPlan.model_mask`);
- `key_order(plan)`: [queries, shown keys], which returned key each position of a sequence-ordered attention map
  shows (`output_attentions=True`);
- `kept_lengths(rows)`: [B] the real positions each row keeps for the next token;
- `with_window_prefill(flag)`: the same policy whose multi-token forwards obey the window (a chunked prefill).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the protocol's types only: this module imports no torch (the CLI validates with its limit)
    import torch

    from .plan import StepPlan
    from .rows import RowState

#: The largest `cache_limit` accepted. A limit is a cap, not an allocation (the cache grows with what it holds), so
#: any limit up to this runs; beyond it, column arithmetic (columns - limit, limit + 1 ring slots) could overflow
#: torch's int64.
MAX_CACHE_LIMIT = 2**62


class Policy(Protocol):
    """See the module docstring."""

    limit: int
    num_sinks: int
    window_prefill: bool

    @property
    def slots(self) -> int: ...

    def new_rows(self, batch: int, device: torch.device) -> RowState: ...

    def plan(self, rows: RowState, new_real: torch.Tensor, *, model_mask: bool, per_query_sinks: bool) -> StepPlan: ...

    def first_forward_is_causal(self, cursor: int, num_new: int) -> bool: ...

    def key_order(self, plan: StepPlan) -> torch.Tensor: ...

    def kept_lengths(self, rows: RowState) -> torch.Tensor: ...

    def with_window_prefill(self, window_prefill: bool) -> Policy: ...
