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

from .validation import check_int, check_policy, check_protected, check_window


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
    #: the scored eviction policy of the full-attention layers (`core.eviction`), None: the window
    policy: object = None

    @classmethod
    def from_arguments(
        cls, cache_limit, num_sink_tokens=None, *, window_prefill: bool = False, source: str = "", cache_policy=None
    ) -> BoundedRequest:
        """Validate the arguments as given (limit in [1, 2^62], 0 <= sinks < limit, a known `cache_policy` whose
        protected window leaves a key to evict)."""
        limit, sinks = check_window(cache_limit, num_sink_tokens, source=source)
        policy = check_policy(cache_policy, source=source)
        if policy is not None:
            check_protected(policy, limit, sinks)
        return cls(limit, sinks, window_prefill, source, policy=policy)

    @property
    def protected(self) -> int:
        """The scored policy's protected window (0 for the window, which has none)."""
        return 0 if self.policy is None else check_protected(self.policy, self.limit, self.sinks)

    def kept(self, kind: str, size: int | None) -> int:
        """Positions a layer of attention type `kind` keeps, given its native `size` (`hf.layer_types`): the limit,
        or fewer where the model's own pattern hides more. A sliding window W (keys a query sees, itself included):
        min(L, W - 1), the smaller window wins, sinks included (they stay visible past W: StreamingLLM over that
        window). Chunks of C (`"chunked_attention"`): min(L, S + C - 1), since a query reads at most C - 1 keys of its
        own chunk besides itself and the sinks, visible from the first chunk only, take none of them. The one place
        this is computed."""
        if size is None:
            return self.limit
        if kind == "chunked_attention":
            return min(self.limit, self.sinks + size - 1)
        return min(self.limit, size - 1)

    def kept_by_type(self) -> dict[str, int]:
        return {kind: self.kept(kind, size) for kind, size in self.windows}

    def for_windows(self, windows: Mapping[str, int | None]) -> BoundedRequest:
        """This request fitted to a model whose attention types have these native sizes (`hf.layer_types`): the
        sinks must leave at least one recent position in every type's window. Each type then runs the window with
        sinks over what it keeps (docs/policies.md, "Attention sinks": hybrids)."""
        fitted = dataclasses.replace(self, windows=tuple(windows.items()))
        if not self.sinks:
            return fitted
        for kind, size in fitted.windows:
            kept = fitted.kept(kind, size)
            note = " (below `cache_limit`)"
            if kept < self.limit:
                note = f" (below the effective cache limit {kept} of the {kind} layers: the model's sliding_window={size})"
            check_int("num_sink_tokens", self.sinks, 0, kept - 1, source=self.source, note=note)
        return fitted

    def with_window_prefill(self, window_prefill: bool) -> BoundedRequest:
        return dataclasses.replace(self, window_prefill=window_prefill)
