"""The growth rule of a bounded cache's ring, written from its specification (not from cachelimit's code), for
the tests that count slots and bytes exactly.

Specification: after a forward that ends at column `end`, the ring must hold `min(end, R)` slots
(`R = L - S + 1`: the `L - S` most recent columns plus the slot the next token is written into). When a forward
needs more slots than are allocated, the ring is reallocated to `max(needed, 2 * allocated)` slots, but never more
than `R`: at least doubling makes the copies amortised O(1) per token, and the cap keeps the bound.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachelimit.hf.compat import CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN


def ring_capacities(widths: Iterable[int], ring: int) -> list[int]:
    """Ring slots allocated after each forward of the given widths (tokens per forward, pads included)."""
    allocated, end, capacities = 0, 0, []
    for width in widths:
        end += width
        needed = min(end, ring)
        if needed > allocated:
            allocated = min(ring, max(needed, 2 * allocated))
        capacities.append(allocated)
    return capacities


def forward_widths(prompt: int, chunk: int | None, new_tokens: int) -> list[int]:
    """Widths of the forwards of one `generate`: the prompt (in chunks of `chunk`), then one per new token but the
    last (the last token is chosen, never fed)."""
    prefill = [prompt] if chunk is None else [min(chunk, prompt - start) for start in range(0, prompt, chunk)]
    if chunk is not None and CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN:  # transformers 4.x: the last prompt token
        prefill = [min(chunk, prompt - 1 - start) for start in range(0, prompt - 1, chunk)] + [1]  # is a decode step
    return prefill + [1] * (new_tokens - 1)


def widths_between(ends: list[int]) -> list[int]:
    """Widths of consecutive forwards from the columns seen after each of them."""
    return [end - begin for begin, end in zip([0, *ends[:-1]], ends, strict=True)]
