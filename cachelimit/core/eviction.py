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


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype scores are computed in: float32 for half-precision keys or queries (a sum over hundreds of keys in
    bfloat16 loses the digits that order near-equal scores), the tensor's own dtype otherwise."""
    import torch

    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def as_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`tensor` in `dtype`, with no op dispatched when it is in it already (a host-bound decode step pays for each
    op it dispatches: a scored step's slot writes, its one-query attention)."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


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

    @staticmethod
    def inverse_norms(keys: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
        """[B, H, K] 1 / |k| of each key in float32 at least, 0 where `real` ([B, H, K] bool) is False. A scored
        layer keeps it beside each slot, written with the key (`core.scored_layer`): a decode step then norms one
        key, not all `L + 1`."""
        import torch

        work = working_dtype(keys.dtype)
        inverse = torch.linalg.vector_norm(keys, dim=-1, dtype=work).clamp_min_(torch.finfo(work).tiny).reciprocal_()
        return inverse if real is None else torch.where(real, inverse, 0)

    def eviction_scores(
        self,
        keys: torch.Tensor,
        real: torch.Tensor | None,
        inverse: torch.Tensor | None = None,
        workspace: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, H, K] how much each key deserves eviction (higher goes first): its cosine similarity to the mean unit
        key of the real keys (`real`: [B, H, K] bool, None when every key is real; a pad's key is left out, as a
        model may leave anything there), recomputed from the keys at every eviction, times the length of the
        head's sum of unit keys: one positive factor per head, so the same order, for three ops fewer a step.
        `inverse`: the keys' `inverse_norms` (0 for pads), where the caller keeps them. In float32 at least;
        `workspace`: a float32 tensor of the keys' shape to convert half-precision keys into, where the caller keeps
        one (a fresh copy per layer and step is a new allocation the size of the layer's keys, measurably slower)."""
        import torch

        work = keys
        if working_dtype(keys.dtype) != keys.dtype:
            work = keys.float() if workspace is None else workspace.copy_(keys)
        if real is not None:
            work = work.masked_fill(~real[..., None], 0)
        if inverse is None:
            inverse = self.inverse_norms(work, real)  # [B, H, K]
        batch, heads, count, dim = work.shape
        # two batched matrix-vector products over [B * H] heads: 10-30 % faster on CPU than a matmul and an einsum
        flat = work.reshape(batch * heads, count, dim)
        anchor = torch.bmm(inverse.reshape(batch * heads, 1, count), flat)  # the sum of the real unit keys
        return torch.bmm(anchor, flat.transpose(1, 2)).view(batch, heads, count) * inverse


@dataclass(frozen=True)
class SnapKV:
    """SnapKV (Li et al., arXiv 2404.14469): keep the keys the last queries attend to most.

    After a forward, each candidate key's score is the attention it gets from the forward's last `window` queries
    (softmax probabilities, as the model computes them, averaged over those queries and over the query heads of its
    KV group), max-pooled over `kernel` neighbouring keys (SnapKV's clustering); the highest scores are kept. So a
    prompt longer than the budget is read whole (or in chunks, `prefill_chunk_size`), then cut to its `L` keys most
    relevant to its end (a question after a document). A decode step has one query: its own attention scores it.
    Needs the queries, so the attention call itself computes them (`hf.attention_scores`), without the full map."""

    protected: int | None = None
    window: int = 32
    kernel: int = 7
    name: ClassVar[str] = "snapkv"


@dataclass(frozen=True)
class TOVA:
    """TOVA (Oren et al., arXiv 2401.06104): evict the key the current query attends to least.

    The score of a key is the attention probability the forward's last query gives it, averaged over the query heads
    of its KV group (TOVA averages over a layer's heads; cachelimit decides per KV head). SnapKV with a window of one
    query and no pooling."""

    protected: int | None = None
    name: ClassVar[str] = "tova"
    window: ClassVar[int] = 1
    kernel: ClassVar[int] = 1


def attention_scores(query, keys, visible, scaling: float, window: int, softcap: float | None = None):
    """[B, H_kv, K] SnapKV/TOVA scores before pooling: the softmax attention of the last `window` queries
    ([B, H_q, q, d]) over `keys` ([B, H_kv, K, d]; `visible`: [B, window, K] bool or None for all), with the model's
    logit `softcap` if it has one, averaged over those queries and each KV group's query heads. In float32 at least."""
    import torch

    batch, heads, queries, dim = query.shape
    kv_heads = keys.shape[1]
    last = query[:, :, -window:]
    work = working_dtype(query.dtype)
    grouped = last.reshape(batch, kv_heads, heads // kv_heads * last.shape[2], dim).to(work)
    logits = (grouped @ keys.to(work).transpose(-1, -2)) * scaling  # [B, H_kv, G * w, K]
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if visible is not None:
        mask = visible[:, None, -last.shape[2] :].repeat(1, 1, heads // kv_heads, 1)
        logits = logits.masked_fill(~mask, float("-inf"))
    return logits.softmax(-1).mean(-2)


def pooled(scores, column, kernel: int, order=None):
    """SnapKV's clustering: each score replaced by the largest among the `kernel` keys nearest in position, the
    keys taken in column order (a head's slots are in no order; `column`: [B, H, K] their columns; `order`: the
    slots in column order when the caller keeps it, `core.scored_state.ColumnOrder`)."""
    import torch

    if kernel <= 1:
        return scores
    order = column.argsort(-1) if order is None else order
    ordered = scores.gather(-1, order)
    ordered = torch.nn.functional.max_pool1d(ordered, kernel, stride=1, padding=kernel // 2)
    return torch.empty_like(scores).scatter_(-1, order, ordered)


#: cache_policy names -> the policy class (None: the window, the default)
POLICIES: dict[str, type | None] = {"window": None, "keydiff": KeyDiff, "tova": TOVA, "snapkv": SnapKV}
#: the scored policy classes (a `cache_policy` object must be one of them)
SCORED = (KeyDiff, TOVA, SnapKV)
#: the policies whose scores come from the queries (computed by the attention call, `hf.attention_scores`)
QUERY_SCORED = (TOVA, SnapKV)


def protected_positions(spec, limit: int, sinks: int) -> int:
    """The protected window of `spec` under limit `L` and `S` sinks, its default resolved."""
    if spec.protected is None:
        return min(DEFAULT_PROTECTED, (limit - sinks) // 2)
    return spec.protected
