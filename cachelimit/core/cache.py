"""`BoundedCache`: a transformers `Cache` whose layers never hold more than `limit` positions.

Like transformers' own caches (`DynamicCache(config=...)` builds each layer from its layer type), a bounded cache is
made of one layer per decoder layer, chosen by that layer's type: a `BoundedLayer` (`core.layers`) for an attention
layer, transformers' own layer for one the bound leaves alone (a linear-attention state, a layer that reads another
layer's keys). Bounded layers come in *groups*: the layers of one attention type (full, or sliding with its window)
share one policy (`core.policy`), so each forward is planned once per group (`core.plan`), and the model gets one mask
per group. Which layers, groups, windows and rotaries a model has is read by the integration (`hf.layout`), which
*fits* the cache to a model; a cache built by hand (`BoundedCache(limit, sinks)`) is fitted by the first `generate`
that uses it. Placement and growth in the ring: `core.ring`.

Under `torch.compile` (`is_compileable`) a step's plan and mask are made before the forward, in eager code; the
compiled forward writes each layer's new key and value at a tensor index, rotates its RoPE sinks from the plan's sink
shift (fused into the graph) and returns buffers whose shapes stay fixed while the ring does not grow
(`StepPlan.returned`). What eager layers check inside the forward is kept outside the graph: a compiled layer records
the plan it carried out and `settle` counts it, so an interrupted forward is refused by a continuation as in eager.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import torch
from transformers.cache_utils import Cache

from .group import LayerGroup
from .layers import BoundedLayer
from .memory import kv_bytes
from .plan import StepPlan
from .window import WindowPolicy

__all__ = ["BoundedCache", "LayerGroup", "kv_bytes"]

UNFITTED = (
    "BoundedCache was used in a forward before it was fitted to a model; run it through "
    "`model.generate(..., cache_limit=...)` on a model patched with `cachelimit.patch()`, or build it with "
    "`BoundedCache.from_model(model, ...)`."
)


class BoundedCache(Cache):
    """A cache that keeps at most `limit` positions per layer and row, `num_sink_tokens` of them pinned to each row's
    first real tokens. Drive it through `generate(..., cache_limit=...)` on a model patched with `cachelimit.patch`;
    every forward is announced with `begin_step`. `policy` is the run's limit and sinks (a group of sliding layers may
    keep fewer: its own policy); `window_prefill` makes a chunked prefill obey the window.

    `static=True` allocates each layer's ring at its full size (`L - S + 1` slots) with the first forward instead of
    growing it with what it holds: decode steps then have one shape from the first on, which is what a compiled
    forward needs (`is_compileable`), at the price of the full ring's memory (and attention over its unwritten, masked
    slots) before the window fills. The growing ring (the default) holds only what it has seen, and compiles too when
    a `compile_config` asks for it, with one recompile each time the ring grows (at most one per doubling)."""

    def __init__(
        self,
        limit: int,
        num_sink_tokens: int = 0,
        *,
        window_prefill: bool = False,
        static: bool = False,
        cache_policy: object = None,
    ):
        if not isinstance(static, bool):
            raise TypeError(f"`static` must be a bool, got {type(static).__name__} {static!r}.")
        self.policy = WindowPolicy(limit, num_sink_tokens, window_prefill)
        #: the scored eviction policy of the full-attention layers (`core.eviction`), None for the window
        self.cache_policy = cache_policy
        self.static = static
        #: a `compile_config` asks this run to compile its decoding forward (set by each bounded `generate`)
        self.compile_requested = False
        self.groups: list[LayerGroup] = []
        self.owner: weakref.ref | None = None  # the model it was fitted to (see `fit`)
        #: the layer types whose layers the bound leaves alone and that take a mask of their own (recurrent layers:
        #: transformers makes theirs from the 2D padding mask)
        self.recurrent_kinds: tuple[str, ...] = ()
        self._rotates_sinks = False
        self._hiding_compileable = False
        #: columns from this one on are tokens `generate` appended (real in every row); None: read every mask
        self.generated_from: int | None = None
        self._unread_mask: torch.Tensor | None = None  # the widest 2D mask whose generated columns were not read
        super().__init__(layers=[])

    @classmethod
    def from_model(
        cls,
        model,
        cache_limit: int,
        num_sink_tokens: int = 0,
        *,
        window_prefill: bool = False,
        static: bool = False,
        cache_policy: object = None,
    ) -> BoundedCache:
        """The cache `generate(..., cache_limit=L, num_sink_tokens=S)` would build for `model`, fitted to it: each
        layer type's native window applies (min(L, W - 1) positions kept) and RoPE sinks move with the model's own
        rotary. The model must be patched (`cachelimit.patch()` gives its class the method that describes it)."""
        build = getattr(model, "_cachelimit_bounded_cache", None)
        if build is None:
            raise ValueError(f"{type(model).__name__} is not patched; call cachelimit.patch() first.")
        return build(
            cache_limit, num_sink_tokens, window_prefill=window_prefill, static=static, cache_policy=cache_policy
        )

    @property
    def is_compileable(self) -> bool:
        """Whether transformers may compile the decoding forward around this cache: a static ring always (on CUDA
        `generate` then compiles it by itself, as it does for its own static caches), a growing one when the run
        passed a `compile_config`. Decode steps then return fixed shapes (`StepPlan.returned`). False while the
        original `prepare_inputs_for_generation` runs (`hiding_compileable`): it would build a mask of its own for a
        compileable cache, which the bounded mask replaces."""
        return (self.static or self.compile_requested) and not self._hiding_compileable

    @contextlib.contextmanager
    def hiding_compileable(self) -> Iterator[None]:
        self._hiding_compileable = True
        try:
            yield
        finally:
            self._hiding_compileable = False

    @property
    def fitted(self) -> bool:
        return bool(self.groups)

    def fit(self, model, groups: list[LayerGroup], layers: list, recurrent_kinds: tuple[str, ...] = ()) -> None:
        """Give the cache `model`'s layers (a `BoundedLayer` of one of `groups` per attention layer, transformers'
        own layer object for any other: `recurrent_kinds` are their layer types that take a mask) and record the
        model: its keys are that model's, so it continues only there (`hf.continuation.check_owner`). Only a weak
        reference: a cache never keeps a model alive."""
        self.groups, self.layers, self.recurrent_kinds = groups, layers, recurrent_kinds
        self.owner = weakref.ref(model)
        self._rotates_sinks = any(group.rotates_sinks for group in groups)

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

    def is_generated(self, column: int) -> bool:
        """Whether the token at `column` is one `generate` appended (`generated_from`): real in every row, since
        transformers extends the attention mask with ones, so its step needs nothing read from the device."""
        return self.generated_from is not None and column >= self.generated_from and self.groups[0].rows is not None

    def begin_step(self, new_real: torch.Tensor | None) -> StepPlan:
        """Plan the next forward over `new_real.shape[1]` tokens (bool, False for pads; None: one token per row that
        `generate` appended, see `is_generated`) for every group; returns the first group's plan (its positions are
        every group's). The model builds every group's mask from one 2D mask when it masks a forward itself, so all
        groups decide that alike."""
        if not self.groups:
            raise RuntimeError(UNFITTED)
        self.settle()
        rows = self.groups[0].rows
        if new_real is None:
            if rows is None:
                raise ValueError("`begin_step(None)` plans one generated token per row: it needs the rows of a run.")
            batch, num_new, device = rows.batch, 1, rows.num_real.device
        else:
            (batch, num_new), device = new_real.shape, new_real.device
            new_real = new_real.bool()
        if rows is not None and rows.batch != batch:
            raise ValueError(
                f"`past_key_values` holds {rows.batch} rows but the inputs have {batch}: continue a "
                "returned cache with the same batch (num_beams and num_return_sequences multiply the rows; expand "
                "the cache with `batch_repeat_interleave`)."
            )
        cursor = 0 if rows is None else rows.cursor
        model_mask = num_new > 1 and all(
            group.policy.first_forward_is_causal(cursor, num_new) for group in self.groups
        )
        fixed_shapes = self.static or self.compile_requested
        plans = [
            group.begin_step(
                new_real, model_mask, batch=batch, device=device, fixed_shapes=fixed_shapes, static=self.static
            )
            for group in self.groups
        ]
        return plans[0]

    def settle(self) -> None:
        """Count what compiled forwards wrote: a layer running under `torch.compile` records the plan it carried out
        (`BoundedLayer.update`) instead of advancing its column count inside the graph, where a changing int would be
        a guard (a recompile at every step). Exact per layer, so a forward interrupted half-way is refused by a
        continuation as in eager mode (`hf.continuation`)."""
        for layer in self.bounded_layers:
            plan, layer.compiled_plan = layer.compiled_plan, None
            if plan is not None and layer.cumulative_length == plan.start:
                layer.cumulative_length = plan.start + plan.num_new

    def note_unread_mask(self, attention_mask: torch.Tensor) -> None:
        """Keep the newest 2D mask of a step whose generated column was not read (`is_generated`), for
        `check_generated_columns`."""
        self._unread_mask = attention_mask

    def check_generated_columns(self) -> None:
        """Refuse (ValueError) a run in which a column taken for a generated token was masked: transformers always
        extends the mask with ones, so this never fires under `generate`; one read per run, not per step."""
        mask, self._unread_mask = self._unread_mask, None
        if mask is None or self.generated_from is None or mask.shape[-1] <= self.generated_from:
            return
        if not bool(mask[:, self.generated_from :].all()):
            raise ValueError(
                "The attention mask marks a generated token as padding, but a bounded cache took every token "
                f"`generate` appended (from column {self.generated_from} on) as real: its output cannot be trusted."
            )

    def attention_index(self, layer_idx: int) -> int:
        """`layer_idx`, or the first bounded layer where it names a recurrent one (all bounded layers saw the same
        tokens): transformers 5.14-5.22 size the full-attention mask by the first layer that is not sliding, which
        here (bounded layers say they are sliding) can be a recurrent layer, whose length transformers refuses."""
        if layer_idx < len(self.layers) and not isinstance(self.layers[layer_idx], BoundedLayer):
            bounded = (index for index, layer in enumerate(self.layers) if isinstance(layer, BoundedLayer))
            return next(bounded, layer_idx)
        return layer_idx

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return super().get_seq_length(self.attention_index(layer_idx))

    def get_mask_sizes(self, query_length, layer_idx: int = 0, *args, **kwargs) -> tuple[int, int]:
        return super().get_mask_sizes(query_length, self.attention_index(layer_idx), *args, **kwargs)

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
        self._unread_mask = None

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
