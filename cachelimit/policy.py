"""The bounding policy: how many positions a cache keeps, and how many of them are attention sinks."""

from __future__ import annotations

from dataclasses import dataclass

#: The largest `cache_limit` accepted. A limit is a cap, not an allocation (the cache grows with what it holds), so
#: any limit up to this runs; beyond it, column arithmetic (columns - limit, limit + 1 ring slots) could overflow
#: torch's int64.
MAX_CACHE_LIMIT = 2**62


@dataclass(frozen=True)
class WindowPolicy:
    """Keep the first `num_sinks` real tokens of each row plus its most recent `limit - num_sinks` tokens.

    `limit` is the `cache_limit` of `generate`: at most that many positions stay cached between steps, and
    each new token reads them plus itself (transformers' `sliding_window = limit + 1`).
    `window_prefill` makes a multi-token forward (a chunked prefill) obey the window for every query;
    otherwise it reads the whole kept past and all new tokens causally, and the cache is cut afterwards.
    `native_window` is a model's own `sliding_window` (keys a query may see, itself included), applied on top.
    """

    limit: int
    num_sinks: int = 0
    window_prefill: bool = False
    native_window: int | None = None

    @property
    def recent(self) -> int:
        """Most recent positions kept besides the sinks."""
        return self.limit - self.num_sinks

    @property
    def ring_size(self) -> int:
        """Ring slots once the window is full: the recent positions plus the slot the next token is written into
        (the ring is allocated only as it fills; see `step_plan`)."""
        return self.recent + 1

    @property
    def slots(self) -> int:
        """The most slots a layer ever holds (sinks + full ring); a cap, never allocated up front."""
        return self.num_sinks + self.ring_size
