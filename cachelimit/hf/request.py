"""`BoundedRequest`: a bounded run's arguments, resolved and validated once, into one value.

Every entry point makes one: the `generate` wrapper (`hf.generate`), the cache kinds of `set_cache_implementation`
(`hf.cache_setting`) and the command line (`--cache-limit`, `--sinks`). So the limit, the sinks and what a model's own
sliding windows do to them are checked in one place, with the same ranges and messages everywhere. No torch here: the
command line validates its flags before importing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .validation import check_int, check_window


@dataclass(frozen=True)
class BoundedRequest:
    """`limit` (the user's `cache_limit`) and `sinks` (`num_sink_tokens`), where they came from (`source`, for the
    error messages), whether a multi-token forward obeys the window (`window_prefill`: a chunked prefill), and, once
    fitted to a model (`for_windows`), the native window of each of its attention types (None: full attention)."""

    limit: int
    sinks: int = 0
    window_prefill: bool = False
    source: str = ""
    windows: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def from_arguments(
        cls, cache_limit, num_sink_tokens=None, *, window_prefill: bool = False, source: str = ""
    ) -> BoundedRequest:
        """Validate the arguments as given (limit in [1, 2^62], 0 <= sinks < limit)."""
        limit, sinks = check_window(cache_limit, num_sink_tokens, source=source)
        return cls(limit, sinks, window_prefill, source)

    def kept(self, window: int | None) -> int:
        """Positions a layer keeps: the limit, or fewer under a native sliding window `window` (keys a query sees,
        itself included): the smaller window wins, min(L, W - 1). The one place this is computed."""
        return self.limit if window is None else min(self.limit, window - 1)

    def kept_by_type(self) -> dict[str, int]:
        return {kind: self.kept(window) for kind, window in self.windows}

    def for_windows(self, windows: Mapping[str, int | None]) -> BoundedRequest:
        """This request fitted to a model whose attention types have these native windows: the sinks must leave at
        least one recent position in every type's window, and sinks on types that keep different numbers of positions
        are not served yet (no independent reference checks them)."""
        fitted = dataclasses.replace(self, windows=tuple(windows.items()))
        kept = fitted.kept_by_type()
        if not self.sinks or not kept:
            return fitted
        smallest = min(kept.values())
        sliding = {kind: window for kind, window in windows.items() if window is not None}
        note = " (below `cache_limit`)"
        if smallest < self.limit:
            window = min(sliding.values())
            note = f" (below the effective cache limit {smallest}: the model's sliding_window={window})"
        check_int("num_sink_tokens", self.sinks, 0, smallest - 1, source=self.source, note=note)
        if len(set(kept.values())) > 1:
            window = min(sliding.values())
            raise ValueError(
                f"`num_sink_tokens` on a model whose layer types keep different windows (sliding_window={window} "
                f"keeps {min(kept.values())} positions, cache_limit={self.limit} keeps {max(kept.values())}) is not "
                f"supported yet: use cache_limit <= {window - 1} with sinks, or num_sink_tokens=0."
            )
        return fitted

    def with_window_prefill(self, window_prefill: bool) -> BoundedRequest:
        return dataclasses.replace(self, window_prefill=window_prefill)
