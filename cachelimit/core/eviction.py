"""Scored eviction policies: what a bounded layer keeps when it keeps by score rather than by age.

The window (`core.window`) keeps the most recent positions. A scored policy keeps, per layer and per KV head, the
positions whose keys score as most worth keeping, besides two kinds it never evicts: each row's first `S` real
tokens (the sinks, `num_sink_tokens`) and the `protected` most recent positions. Each policy is one small frozen
dataclass (the user's spelling: `cache_policy="keydiff"` or `cache_policy=KeyDiff(protected=8)`); its `eviction_scores`
says which keys go first. The layer that carries it out is `core.scored_layer`, the plan `core.scored`.

Kept keys keep their original positions (their RoPE rotation is the one they were written with), as the papers
define these policies: a key's position is part of what its score measured, and moving it would change what a query
reads from it. New tokens get their absolute positions, as without a limit.

No torch at import time: argument validation uses these classes without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

#: the default protected window: the most recent min(DEFAULT_PROTECTED, (L - S) // 2) positions
DEFAULT_PROTECTED = 32


@dataclass(frozen=True)
class KeyDiff:
    """KeyDiff (Park et al., arXiv 2504.15364): evict the key least distinct from the others.

    Per layer and KV head, the anchor is the mean direction of the keys held (each real key normalised to unit
    length, then averaged); a key's score is its cosine similarity to the anchor, and the key with the highest
    similarity (the least distinct) is evicted. Needs no attention weights, so it runs with any attention
    implementation and compiles. Scores are taken over every key the layer holds when it must evict (after a
    decode step: the `L` kept plus the new one; after a multi-token forward: the kept past plus all new tokens, of
    which the `L` least similar are kept, as the paper's block-wise prefill does). `protected`: the most recent
    positions never evicted (None: min(32, (L - S) // 2)); with `protected = L - S` it keeps exactly the window."""

    protected: int | None = None
    name: ClassVar[str] = "keydiff"

    def eviction_scores(self, keys: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor:
        """[B, H, K] how much each key deserves eviction (higher goes first): its cosine similarity to the mean unit
        key of the real keys (`real`: [B, H, K] bool, None when every key is real; a pad's key is left out, as a
        model may leave anything there). Computed in float32 at least."""
        import torch

        work = keys.float() if keys.dtype in (torch.float16, torch.bfloat16) else keys
        if real is not None:
            work = work.masked_fill(~real[..., None], 0)
        inverse = work.norm(dim=-1).clamp_min(torch.finfo(work.dtype).tiny).reciprocal()  # [B, H, K]
        weights = inverse if real is None else inverse * real.to(work.dtype)
        anchor = (weights.unsqueeze(-2) @ work).squeeze(-2)  # [B, H, d]: the sum of the real unit keys
        anchor = anchor / anchor.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(work.dtype).tiny)
        return (work @ anchor.unsqueeze(-1)).squeeze(-1) * inverse


#: cache_policy names -> the policy class (None: the window, the default)
POLICIES: dict[str, type | None] = {"window": None, "keydiff": KeyDiff}
#: the scored policy classes (a `cache_policy` object must be one of them)
SCORED = (KeyDiff,)


def protected_positions(spec, limit: int, sinks: int) -> int:
    """The protected window of `spec` under limit `L` and `S` sinks, its default resolved."""
    if spec.protected is None:
        return min(DEFAULT_PROTECTED, (limit - sinks) // 2)
    return spec.protected
