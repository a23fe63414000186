"""What some families cannot serve exactly, refused before any token: the `check_request` of their table entries.

Each check gets the model and the run's fitted `hf.request.BoundedRequest` (its `limit`, `sinks`) and raises a
ValueError that says why; a family without a check serves every bounded run its layers allow. No torch here (the
checks read configs), so the table stays importable without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: why ALiBi models are refused (bloom, mpt, and Falcon with alibi=True)
ALIBI = (
    "ALiBi: the model computes its position bias from the 2D attention mask over the key columns in sequence order, "
    "but a bounded cache keeps keys in ring order and hands the model a 4D mask, so the bias would be wrong"
)


def sinks_refused(reason: str) -> Callable[[Any, Any], None]:
    """A family whose sink keys cannot be moved to StreamingLLM's positions exactly: windows run, sinks are refused."""

    def check(model, request) -> None:
        if request.sinks:
            raise ValueError(
                f"`num_sink_tokens` is not served on {type(model).__name__}: {reason}. Use num_sink_tokens=0 (a "
                "plain window, which is exact)."
            )

    return check


#: HunYuan normalises queries and keys *after* the rotation, with a weight per dimension (a norm that does not
#: commute with the rotation): a rotated sink key is not the key the model would write at that position.
NORM_AFTER_ROTATION = sinks_refused(
    "it normalises keys after the rotation (query/key layer norms with a weight per dimension), so a cached key "
    "cannot be moved to another position by rotating it"
)


def no_alibi(model, request) -> None:
    """Falcon serves its rotary configurations; those with `alibi=True` (Falcon-RW) are refused."""
    if getattr(model.config, "alibi", False):
        raise ValueError(f"`cache_limit` is not served on {type(model).__name__} with config.alibi=True: {ALIBI}.")


def query_scale_by_position(model, request) -> None:
    """Ministral 3 scales its queries by their absolute position (`llama_4_scaling_beta`); StreamingLLM's sinks would
    give queries cache-relative positions, and so another scale: windows run (absolute positions, as unbounded),
    sinks are refused where the scaling is on."""
    beta = (getattr(model.config, "rope_parameters", None) or {}).get("llama_4_scaling_beta")
    if request.sinks and beta:
        raise ValueError(
            f"`num_sink_tokens` is not served on {type(model).__name__} with llama_4_scaling_beta={beta}: it scales "
            "each query by its absolute position, which StreamingLLM's cache-relative positions would change. Use "
            "num_sink_tokens=0 (a plain window, which is exact)."
        )
