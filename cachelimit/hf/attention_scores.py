"""The attention scores of a query-scored policy (TOVA, SnapKV: `core.eviction`), taken inside the attention call.

Those policies score a key by the attention the newest queries give it, which a cache never sees: `Cache.update` gets
keys and values, not queries. The attention call gets all three, so for the duration of a bounded `generate` whose
policy needs them, cachelimit puts a thin wrapper in front of the attention functions transformers dispatches to
(`ALL_ATTENTION_FUNCTIONS`: SDPA, flex attention and, where the release dispatches eager attention through it too,
eager). For a module of the running cache's scored layers, the wrapper computes the softmax attention of the last
queries over the keys the layer returned (only those rows: never the full map), hands it to the layer, which carries
out the eviction it held back (`ScoredLayer.settle_scores`), and returns the attention output. Every other call
(other models, other threads' runs, the layers the bound leaves alone) goes straight to transformers' function.

A decode step has one query, whose probabilities are the attention itself: the wrapper computes them once and uses
them for the output too (softmax(q k^T) v, as SDPA computes it up to float noise), so the scores cost no second
product. A multi-token forward runs the attention function as it is, then scores the last queries on top.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ..core.cache import BoundedCache
from ..core.eviction import as_dtype, attention_scores, working_dtype
from ..core.scored_layer import ScoredLayer

#: the attribute that ties an attention module to the scored layer of the running cache
SCORED_LAYER = "_cachelimit_scored_layer"
#: what a wrapper cannot score exactly (learned attention sinks add a column to the softmax)
UNSERVED = ("s_aux", "sinks", "position_bias")

_LOCK = threading.Lock()
_installed: dict[str, list] = {}  # implementation -> [the instance's own entry before, the runs using the wrapper]


def attention_modules(model) -> dict[int, torch.nn.Module]:
    """Each decoder layer's self-attention module by layer index (modules that carry their `layer_idx`)."""
    found: dict[int, torch.nn.Module] = {}
    for module in model.modules():
        if type(module).__name__.endswith("Attention") and isinstance(getattr(module, "layer_idx", None), int):
            found.setdefault(module.layer_idx, module)
    return found


def dispatched(implementation: str):
    """The function transformers runs for `implementation` now (None: eager, which early releases do not dispatch)."""
    try:
        return ALL_ATTENTION_FUNCTIONS[implementation]
    except KeyError:
        return None


def scoring(original):
    def attention(module, query, key, value, attention_mask, *args, **kwargs):
        layer = getattr(module, SCORED_LAYER, None)
        if layer is None or layer.pending is None:
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        unserved = [name for name in UNSERVED if kwargs.get(name) is not None]
        if unserved or kwargs.get("dropout", 0.0):
            raise ValueError(
                f"cache_policy={layer.group.policy.spec.name!r} cannot score {type(module).__name__}'s attention "
                f"exactly ({', '.join(unserved) or 'dropout'}): use cache_policy='keydiff' or the window."
            )
        plan, _ = layer.pending
        spec = layer.group.policy.spec
        scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
        softcap = kwargs.get("softcap")
        if query.shape[2] == 1 and softcap is None:  # one query: its probabilities are the attention
            output, probabilities = one_query(query, key, value, plan.last_visibility(1), scaling)
            layer.settle_scores(per_cached_head(probabilities, layer))
            return output, None
        result = original(module, query, key, value, attention_mask, *args, **kwargs)
        visible = plan.last_visibility(spec.window)
        scores = attention_scores(query, key, visible, scaling, spec.window, softcap)
        layer.settle_scores(per_cached_head(scores, layer))
        return result

    attention.cachelimit_original = original
    return attention


def per_cached_head(scores: torch.Tensor, layer: ScoredLayer) -> torch.Tensor:
    """Scores per head of the keys the attention read -> per head of the cache: a model that expands its cached
    heads before attention (multi-head latent attention caches one latent head for all query heads) averages the
    query heads each cached head serves, as a KV group's are averaged."""
    cached = layer.keys.shape[1]
    if scores.shape[1] == cached:
        return scores
    return scores.reshape(scores.shape[0], cached, -1, scores.shape[-1]).mean(2)


def one_query(query, key, value, visible, scaling: float):
    """A one-query attention step, softmax(q k^T * scaling) v, returning the output as transformers' attention
    functions do ([B, 1, H_q, d]) and the probabilities averaged over each KV group's query heads ([B, H_kv, K]).

    Half-precision inputs are computed in float32 throughout, as SDPA accumulates them: on CPU a half-precision
    batched matmul of these shapes took 4 to 5 times the float32 one, conversions included (bf16, one layer of
    SmolLM2 at L=1024: two products of about 600 us against about 125 us each plus 70 us per conversion; SDPA's
    own step about 620 us), so the scores come with the attention, not on top of it."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    work = working_dtype(query.dtype)
    grouped = as_dtype(query.reshape(batch, kv_heads, heads // kv_heads, dim), work) * scaling
    logits = grouped @ as_dtype(key, work).transpose(-1, -2)  # [B, H_kv, G, K]
    if visible is not None:
        logits = logits.masked_fill(~visible[:, None], float("-inf"))
    probabilities = logits.softmax(-1)
    output = as_dtype(probabilities @ as_dtype(value, work), value.dtype).reshape(batch, heads, 1, value.shape[-1])
    return output.transpose(1, 2), probabilities.mean(-2)


@contextlib.contextmanager
def scoring_attention(model, cache: BoundedCache) -> Iterator[None]:
    """While active, the attention of `model`'s query-scored layers on `cache` hands its scores to them (see the
    module docstring). Nothing is installed for a cache without such layers."""
    scored = {index: layer for index, layer in enumerate(cache.layers) if isinstance(layer, ScoredLayer)}
    scored = {index: layer for index, layer in scored.items() if layer.needs_query}
    if not scored:
        yield
        return
    if model.config._attn_implementation == "eager" and not hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
        raise ValueError(
            f"cache_policy={cache.cache_policy.name!r} with attn_implementation='eager' needs a transformers release "
            "that dispatches eager attention through ALL_ATTENTION_FUNCTIONS (this one calls it directly): use "
            "attn_implementation='sdpa' or 'flex_attention'."
        )
    modules = attention_modules(model)
    missing = sorted(set(scored) - set(modules))
    if missing:
        raise ValueError(
            f"cache_policy={cache.cache_policy.name!r} needs each attention layer's queries, but "
            f"{type(model).__name__}'s layers {missing} have no attention module cachelimit can find: use "
            "cache_policy='keydiff' or the window."
        )
    implementation = model.config._attn_implementation
    with _LOCK:
        if implementation not in _installed:  # wrapped once, however many runs use it
            local = getattr(ALL_ATTENTION_FUNCTIONS, "_local_mapping", {})
            _installed[implementation] = [local.get(implementation), 0]  # what to put back, and the runs using it
            ALL_ATTENTION_FUNCTIONS[implementation] = scoring(dispatched(implementation) or _eager_of)
        _installed[implementation][1] += 1
    for index, layer in scored.items():
        setattr(modules[index], SCORED_LAYER, layer)
    try:
        yield
    finally:
        for index in scored:
            vars(modules[index]).pop(SCORED_LAYER, None)
        with _LOCK:
            _installed[implementation][1] -= 1
            if not _installed[implementation][1]:
                previous = _installed.pop(implementation)[0]
                if previous is None:
                    del ALL_ATTENTION_FUNCTIONS[implementation]
                else:
                    ALL_ATTENTION_FUNCTIONS[implementation] = previous


def _eager_of(module, *args, **kwargs):
    """Eager attention as the module's own modeling file defines it (releases that dispatch eager through
    `ALL_ATTENTION_FUNCTIONS` find cachelimit's wrapper there, which calls this for unscored layers)."""
    import sys

    return sys.modules[type(module).__module__].eager_attention_forward(module, *args, **kwargs)
