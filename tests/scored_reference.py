"""Independent references for the scored eviction policies (`cachelimit.core.eviction`), sharing no code with them.

1. `slow_reference`: each policy written from its paper's formula, slowly. It replays a token sequence on the unpatched model
   one forward at a time with transformers' own `DynamicCache` (which keeps every key ever written), hides from each
   layer and KV head the keys it has evicted (a per-layer, per-head mask handed to each attention module), and after
   every forward recomputes every score from the full history of keys: the anchor is the mean of the unit keys a head
   holds (real tokens only), a key's score its cosine similarity to the anchor; the sinks (each row's first S real
   tokens) and the `protected` most recent columns are never evicted, pads go first; a decode step evicts the highest
   score, a multi-token forward keeps the L lowest. TOVA and SnapKV score a key by the attention probabilities the
   forward's last queries give it (read from transformers' own eager attention weights, `output_attentions`, on an
   eager twin of the model), averaged over those queries and the KV group's query heads, SnapKV's max-pooled over
   neighbouring positions. It records, per forward, the real columns each head keeps and the smallest gap between
   a kept and an evicted score (a choice closer than float noise is a tie).

2. `replay_logits`: ONE full-sequence forward of the unpatched model without a cache, whose per-layer, per-head masks
   let each token read exactly what the bounded run kept when it was processed (the recorded kept sets) plus the
   tokens of its own forward before it, with explicit positions. Exact for the same reason as the banded reference
   (`tests.reference`): every hidden state is a function of what its token read at every layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import DynamicCache

from cachelimit.hf.compat import CACHE_ARGUMENT


def attention_modules(model) -> dict[int, torch.nn.Module]:
    """Each decoder layer's self-attention module, by layer index."""
    found = {}
    for module in model.modules():
        if type(module).__name__.endswith("Attention") and isinstance(getattr(module, "layer_idx", None), int):
            found.setdefault(module.layer_idx, module)
    return found


def mask_for(model, seen: torch.Tensor) -> torch.Tensor:
    """[B, H, q, k] booleans -> the 4D mask the model's attention implementation takes (boolean for SDPA)."""
    if model.config._attn_implementation == "sdpa":
        return seen
    return torch.zeros(seen.shape, dtype=model.dtype).masked_fill(~seen, torch.finfo(model.dtype).min)


def replacing(mask: torch.Tensor):
    """A forward pre-hook that hands an attention module `mask` as its `attention_mask`."""

    def replace(module, args, kwargs):
        kwargs["attention_mask"] = mask
        return args, kwargs

    return replace


@contextlib.contextmanager
def per_layer_masks(model, masks: dict[int, torch.Tensor]) -> Iterator[None]:
    """While active, attention layer `i` gets `masks[i]` ([B, query heads, q, k] booleans) as its mask."""
    handles = []
    for index, module in attention_modules(model).items():
        if index in masks:
            handles.append(
                module.register_forward_pre_hook(replacing(mask_for(model, masks[index])), with_kwargs=True)
            )
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def keydiff_scores(keys: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The paper's score, for one head: cosine similarity of each key to the mean unit key of the real ones."""
    unit = keys / keys.norm(dim=-1, keepdim=True)
    anchor = unit[real].mean(0)
    return unit @ anchor / anchor.norm()


def positions_of(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def forwards_of(prompt: int, total: int, chunk: int | None) -> list[tuple[int, int]]:
    """The (start, end) columns of each forward of a run: the prompt whole or in chunks, then one token each."""
    step = chunk or prompt
    spans = [(start, min(start + step, prompt)) for start in range(0, prompt, step)]
    return spans + [(column, column + 1) for column in range(prompt, total)]


def keydiff_score(keys, columns, real, attention):
    return keydiff_scores(keys[columns], real[columns])


def attention_score(window: int, kernel: int):
    """The eviction score of TOVA (window 1, kernel 1) and SnapKV: minus the pooled mean attention of the last
    `window` queries (`attention`: [group heads, queries, keys] of one KV head)."""

    def score(keys, columns, real, attention):
        mean = attention[:, -window:, columns].mean((0, 1))
        if kernel > 1:
            mean = torch.nn.functional.max_pool1d(mean[None], kernel, stride=1, padding=kernel // 2)[0]
        return -mean

    return score


def slow_keydiff(model, sequence, attention_mask, prompt, **options):
    return slow_reference(model, sequence, attention_mask, prompt, score=keydiff_score, **options)


def slow_reference(
    model,
    sequence,
    attention_mask,
    prompt,
    *,
    limit,
    sinks,
    protected,
    chunk=None,
    layers=None,
    score,
    eager=None,
    heads=None,
    others=None,
    spans=None,
):
    """The slow reference's kept sets: a list (one per forward) of {layer: [B][H] set of real columns kept}, and
    the smallest score gap met at any eviction (see the module docstring). `eager`: the eager twin whose attention
    weights an attention-scored policy reads (`model` itself for a key-scored one). `layers`: the scored layers
    (default: every attention layer), `heads`: the heads each caches (default: the config's KV heads), `others`:
    {layer: [B, T, T] visibility, or the index of the layer whose mask it shares} for the attention layers the
    policy leaves alone (a hybrid's sliding layers keep their window; a KV-sharing layer reads its owner's)."""
    model = eager or model
    batch, total = sequence.shape
    layers = sorted(attention_modules(model)) if layers is None else layers
    heads = heads or model.config.num_key_value_heads
    groups = model.config.num_attention_heads // heads
    others = others or {}
    real = attention_mask.bool()
    sink_columns = [set(real[b].nonzero().flatten()[:sinks].tolist()) for b in range(batch)]
    kept = {layer: [[set() for _ in range(heads)] for _ in range(batch)] for layer in layers}
    cache, history, gap = DynamicCache(), [], float("inf")
    positions = positions_of(attention_mask)
    for start, end in _spans(spans, prompt, total, chunk):
        masks = {}
        for layer in layers:
            seen = torch.zeros(batch, heads, end - start, end, dtype=torch.bool)
            for b in range(batch):
                for h in range(heads):
                    past = sorted(c for c in kept[layer][b][h] if real[b, c])
                    seen[b, h, :, past] = True
            causal = torch.ones(end - start, end - start, dtype=torch.bool).tril()
            seen[..., start:end] = causal & real[:, None, None, start:end]
            seen[..., torch.arange(end - start), torch.arange(start, end)] = True  # every token reads itself
            masks[layer] = seen.repeat_interleave(groups, dim=1)
        masks.update(other_masks(others, masks, start, end, model.config.num_attention_heads))
        with per_layer_masks(model, masks), torch.no_grad():
            output = model(
                input_ids=sequence[:, start:end],
                attention_mask=attention_mask[:, :end],
                position_ids=positions[:, start:end],
                **{CACHE_ARGUMENT: cache},
                use_cache=True,
                output_attentions=eager is not None,
            )
        for layer in layers:
            keys = cache.layers[layer].keys.double()
            weights = output.attentions[layer].double() if eager is not None else None
            for b in range(batch):
                for h in range(heads):
                    candidates = sorted(kept[layer][b][h] | set(range(start, end)))
                    attention = None if weights is None else weights[b, h * groups : (h + 1) * groups]
                    scores = score(keys[b, h], torch.tensor(candidates), real[b], attention)
                    keep, closest = _keep(scores, candidates, real[b], sink_columns[b], end, limit, protected)
                    kept[layer][b][h] = keep
                    gap = min(gap, closest)
        history.append({layer: _real_only(kept[layer], real) for layer in layers})
    return history, gap


def other_masks(others: dict, masks: dict, start: int, end: int, query_heads: int) -> dict:
    """The masks of the layers a policy leaves alone for the forward over columns [start, end): rows of their
    visibility, or the mask of the layer they share keys with."""
    found = {}
    for layer, seen in others.items():
        if not isinstance(seen, int):
            found[layer] = seen[:, None, start:end, :end].expand(-1, query_heads, -1, -1)
    for layer, owner in others.items():
        if isinstance(owner, int):
            found[layer] = masks.get(owner, found.get(owner))
    return found


def _real_only(kept, real) -> list[list[set[int]]]:
    return [[{c for c in head if real[b, c]} for head in row] for b, row in enumerate(kept)]


def _keep(scores, candidates, real, sink_columns, end, limit, protected):
    """One head's keep set after a forward ending at column `end`, from the candidates' eviction scores, and the gap
    between the last key kept and the first evicted among the scored ones (inf when nothing scored was evicted)."""
    if len(candidates) <= limit:
        return set(candidates), float("inf")
    column = torch.tensor(candidates)
    is_real = real[column]
    pinned = torch.tensor([c in sink_columns or c >= end - protected for c in candidates])
    priority = torch.where(pinned, float("-inf"), scores)
    priority = torch.where(is_real, priority, float("inf"))
    order = sorted(range(len(candidates)), key=lambda i: (float(priority[i]), i))  # equal: the older is kept
    keep, evicted = order[:limit], order[limit:]
    scored_kept = [float(priority[i]) for i in keep if is_real[i] and not pinned[i]]
    scored_evicted = [float(priority[i]) for i in evicted if is_real[i]]
    # the gap between the best evicted and the worst kept score; an exact tie (SnapKV's pooling copies one score to
    # its neighbours) is broken by the documented rule (the older kept) on both sides, so it is no ambiguity
    gaps = [e - k for e in scored_evicted for k in scored_kept if e != k]
    closest = min((abs(g) for g in gaps), default=float("inf")) if scored_kept and scored_evicted else float("inf")
    return {candidates[i] for i in keep}, closest


def _spans(spans, prompt: int, total: int, chunk) -> list[tuple[int, int]]:
    """The forwards to replay: the recorded ones, then one token each up to `total`; else `forwards_of`."""
    if spans is None:
        return forwards_of(prompt, total, chunk)
    end = spans[-1][1]
    return list(spans) + [(column, column + 1) for column in range(end, total)]


def replay_logits(
    model, sequence, attention_mask, prompt, history, *, chunk=None, heads=None, others=None
) -> torch.Tensor:
    """[B, T, vocab] logits of one forward over `sequence` in which each token reads what `history` (the kept sets
    before each forward, one entry per forward) says its layer and head kept, plus its own forward's tokens;
    `heads`, `others`: as for `slow_reference`."""
    batch, total = sequence.shape
    heads = heads or model.config.num_key_value_heads
    groups = model.config.num_attention_heads // heads
    real = attention_mask.bool()
    masks = {}
    spans = _spans(getattr(history, "spans", None), prompt, total, chunk)
    for layer in history[0]:
        seen = torch.zeros(batch, heads, total, total, dtype=torch.bool)
        for index, (start, end) in enumerate(spans):
            before = history[index - 1][layer] if index else None
            for b in range(batch):
                for h in range(heads):
                    past = sorted(before[b][h]) if before else []
                    seen[b, h, start:end, past] = True
            causal = torch.ones(end - start, end - start, dtype=torch.bool).tril()
            seen[:, :, start:end, start:end] = causal & real[:, None, None, start:end]
            seen[:, :, torch.arange(start, end), torch.arange(start, end)] = True
        masks[layer] = seen.repeat_interleave(groups, dim=1)
    masks.update(other_masks(others or {}, masks, 0, total, model.config.num_attention_heads))
    with per_layer_masks(model, masks), torch.no_grad():
        return model(
            input_ids=sequence, attention_mask=attention_mask, position_ids=positions_of(attention_mask)
        ).logits
