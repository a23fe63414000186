"""The checks of a bounded run's arguments: every entry point (the generate wrapper, the cache kinds, the command line)
checks through these functions (via `hf.request.BoundedRequest`), so a value is refused with the same range
everywhere.

Errors are plain ValueError/TypeError that carry the argument's name and requirement as attributes, so a
front end that spells arguments differently (the CLI's `--cache-limit`) rewords the message without re-checking.
No torch or transformers here: the command line validates its flags without importing them.
"""

from __future__ import annotations

from ..core.eviction import POLICIES, SCORED
from ..core.policy import MAX_CACHE_LIMIT


def argument_error(kind: type[Exception], argument: str, requirement: str, source: str = "") -> Exception:
    """A plain `kind` (ValueError or TypeError) whose message names the argument, with `argument`, `requirement`
    (what it must be, and what was given) and `source` (where it was set, e.g. "generation_config") as attributes,
    so that a front end that spells arguments differently (the CLI's `--cache-limit`) can reword it."""
    where = f" (from {source})" if source else ""
    error = kind(f"`{argument}`{where} {requirement}.")
    error.argument, error.requirement, error.source = argument, requirement, source
    return error


def check_int(name: str, value, minimum: int, maximum: int | None = None, *, source: str = "", note: str = "") -> int:
    """`value` must be a plain int (bool is rejected) in [minimum, maximum]; `note` qualifies the range."""
    allowed = f"an int >= {minimum}" if maximum is None else f"an int in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, int):
        raise argument_error(TypeError, name, f"must be {allowed}{note}, got {type(value).__name__} {value!r}", source)
    if value < minimum or (maximum is not None and value > maximum):
        raise argument_error(ValueError, name, f"must be {allowed}{note}, got {value}", source)
    return value


def check_window(cache_limit, num_sink_tokens, *, source: str = "") -> tuple[int, int]:
    """Validate `cache_limit` (in [1, MAX_CACHE_LIMIT]) and `num_sink_tokens` (0 <= S < L); return `(L, S)`. What a
    model's own windows add (a sliding window keeps fewer positions) is checked by `BoundedRequest.for_windows`."""
    if cache_limit is None:
        if num_sink_tokens is not None:
            raise argument_error(
                ValueError, "num_sink_tokens", "needs `cache_limit`: sinks are kept inside a bounded cache", source
            )
        raise argument_error(ValueError, "cache_limit", "must be an int >= 1, got None", source)
    limit = check_int("cache_limit", cache_limit, 1, MAX_CACHE_LIMIT, source=source)
    if num_sink_tokens is None:
        return limit, 0
    return limit, check_int(
        "num_sink_tokens", num_sink_tokens, 0, limit - 1, source=source, note=" (below `cache_limit`)"
    )


def last_position(longest_prompt: int, max_new_tokens: int) -> int:
    """The largest position id a run feeds to the model: the last generated token is never fed back, so a
    `P`-token prompt and `N` new tokens use positions `0 .. P + N - 2`."""
    return longest_prompt + max(max_new_tokens, 1) - 2


def check_policy(cache_policy, *, source: str = ""):
    """`cache_policy` as given (None or "window": the window; a name in `core.eviction.POLICIES`, or a policy object
    such as `KeyDiff(protected=8)`) -> the scored policy object, or None for the window."""
    if cache_policy is None or isinstance(cache_policy, SCORED):
        return cache_policy
    allowed = ", ".join(repr(name) for name in POLICIES)
    if not isinstance(cache_policy, str):
        requirement = f"must be one of {allowed} or a policy object (cachelimit.KeyDiff)"
        raise argument_error(TypeError, "cache_policy", f"{requirement}, got {type(cache_policy).__name__}", source)
    if cache_policy not in POLICIES:
        raise argument_error(ValueError, "cache_policy", f"must be one of {allowed}, got {cache_policy!r}", source)
    policy = POLICIES[cache_policy]
    return None if policy is None else policy()


def check_protected(policy, limit: int, sinks: int, *, source: str = "") -> int:
    """The protected window of a scored `policy` (its default resolved): an int in [0, L - S], so that a step always
    has a key it may evict."""
    from ..core.eviction import protected_positions

    if policy.protected is not None:
        note = f" (at most cache_limit - num_sink_tokens = {limit} - {sinks})"
        check_int("protected", policy.protected, 0, limit - sinks, source=source or policy.name, note=note)
    return protected_positions(policy, limit, sinks)
