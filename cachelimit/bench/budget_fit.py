"""How many rows fit in a KV-memory budget: computed from the documented memory layout, before anything runs.

What a bounded cache is for (issue 19): with the cache bounded, the memory a row costs no longer grows with the
generation, so a fixed KV budget holds more rows (a larger batch, or more beams). The budget scenario
(`bench.budget`) sizes its runs with the functions here and then checks them against the bytes the runs' caches
really held (`cachelimit.core.cache.kv_bytes`), so a wrong rule shows up as a mismatch, not as a silent guess.

The layout, as documented (docs/how-it-works.md, "Memory held", `cachelimit/core/ring.py`), per decoder layer and row, in the
cache's dtype, keys and values each `kv_heads x head_dim` per slot:
- unbounded (transformers' `DynamicCache`): one slot per column seen; after a prompt of P tokens and T new tokens
  that is `P + T - 1` columns (the last token is chosen, never fed back);
- `cache_limit=L, num_sink_tokens=S`: `S` sink slots allocated with the first token, then a ring of at most
  `R = L - S + 1` slots that grows by the rule of `core/ring.py` (to `max(needed, 2 x allocated)`, never above
  `R`; a forward ending at column `c` needs `min(c, R)`), so `L + 1` slots once the window is full; a RoPE model with
  sinks also keeps the `S` sink keys un-rotated (keys only).
These are written here from that specification, not taken from the cache's code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVLayout:
    """What one cached column of one row costs: per decoder layer, `kv_heads x head_dim` keys and as many values."""

    layers: int
    kv_heads: int
    head_dim: int
    element_bytes: int
    rope: bool  # keys carry rotary positions: sinks then also keep their un-rotated keys

    @property
    def slot_bytes(self) -> int:
        """Bytes of one slot of keys (or of values) in one layer and row."""
        return self.kv_heads * self.head_dim * self.element_bytes

    @property
    def column_bytes(self) -> int:
        """Keys + values of one column of one row, all layers."""
        return 2 * self.layers * self.slot_bytes


def layout_of(config, element_bytes: int, rope: bool) -> KVLayout:
    """The layout of a decoder whose every layer is full attention (what the scenario's models are); a model whose
    layers keep other windows (native sliding windows, hybrids) is refused: its rows cost something else."""
    if getattr(config, "sliding_window", None) is not None or "sliding_attention" in (
        getattr(config, "layer_types", None) or ()
    ):
        raise ValueError(
            "the budget fit assumes every layer is full attention; this config has sliding layers "
            f"(sliding_window={getattr(config, 'sliding_window', None)})"
        )
    heads = getattr(config, "num_attention_heads", None) or config.n_head
    hidden = getattr(config, "hidden_size", None) or config.n_embd
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    layers = getattr(config, "num_hidden_layers", None) or config.n_layer
    return KVLayout(layers, kv_heads, head_dim, element_bytes, rope)


def forward_widths(prompt_tokens: int, new_tokens: int) -> list[int]:
    """Tokens per forward of one `generate`: the prompt at once, then one per new token but the last."""
    return [prompt_tokens] + [1] * (new_tokens - 1)


def ring_slots(widths: list[int], ring: int) -> int:
    """Ring slots allocated after forwards of these widths, by the growth rule (see the module docstring)."""
    allocated, end = 0, 0
    for width in widths:
        end += width
        needed = min(end, ring)
        if needed > allocated:
            allocated = min(ring, max(needed, 2 * allocated))
    return allocated


def row_bytes(layout: KVLayout, prompt_tokens: int, new_tokens: int, limit: int | None, sinks: int = 0) -> int:
    """KV bytes one row holds when its generation ends (the most it holds: neither cache ever shrinks)."""
    widths = forward_widths(prompt_tokens, new_tokens)
    if limit is None:
        return sum(widths) * layout.column_bytes
    if not 0 <= sinks < limit:
        raise ValueError(f"sinks must be in [0, limit), got sinks={sinks}, limit={limit}")
    slots = sinks + ring_slots(widths, limit - sinks + 1)
    sink_keys = sinks if (sinks and layout.rope) else 0
    return layout.layers * layout.slot_bytes * (2 * slots + sink_keys)


def rows_that_fit(budget_bytes: int, per_row: int) -> int:
    """The most rows whose caches together stay within the budget (0: not even one)."""
    if budget_bytes < 1 or per_row < 1:
        raise ValueError(f"budget and per-row bytes must be positive, got {budget_bytes} and {per_row}")
    return budget_bytes // per_row
