"""Argument checks that run before any token is generated: bad input is an error, never a fallback."""

from __future__ import annotations

from ..policy import MAX_CACHE_LIMIT


def check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    """`value` must be a plain int (bool is rejected) in [minimum, maximum]."""
    allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int {allowed}, got {type(value).__name__} {value!r}.")
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"`{name}` must be an int {allowed}, got {value}.")
    return value


def check_window(cache_limit, num_sink_tokens) -> tuple[int, int]:
    """Validate `cache_limit` (in [1, MAX_CACHE_LIMIT]) and `num_sink_tokens` (0 <= S < cache_limit)."""
    if cache_limit is None:
        if num_sink_tokens is not None:
            raise ValueError("`num_sink_tokens` needs a `cache_limit`: sinks are kept inside a bounded cache.")
        raise ValueError("`cache_limit` must be an int >= 1, got None.")
    limit = check_int("cache_limit", cache_limit, 1)
    if limit > MAX_CACHE_LIMIT:  # a cap, never allocated, but columns - limit must fit torch's int64
        raise ValueError(f"`cache_limit` must be an int in [1, {MAX_CACHE_LIMIT}] (2**62), got {limit}.")
    sinks = 0 if num_sink_tokens is None else check_int("num_sink_tokens", num_sink_tokens, 0, limit - 1)
    return limit, sinks
