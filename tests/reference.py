"""Independent references for bounded generation.

1. `banded_logits`: ONE forward over the whole generated sequence, without any cache, with an explicit 4D
   visibility ("which earlier tokens did each token read when it was processed") and explicit positions.

   Why this is exact for a trimmed cache, at every depth: in a decoder, the key/value a layer caches for token
   j is a function of token j's hidden state at that layer, which depends only on the keys token j itself
   could read (recursively, at every lower layer) at the moment it was processed. A full-sequence forward in
   which row j of the mask is exactly what token j could read when it was generated reproduces every hidden
   state, every key and every value, so its logits equal the bounded run's logits step by step.

   Why "re-run the last L + 1 tokens without a cache" is NOT a valid reference beyond one layer: the cached
   layer-2 key of the oldest token in the window was computed when that token could still read tokens that
   have since left the window. Re-running the window from scratch recomputes that key from a shorter context,
   so from the second layer on it answers a different question (it only matches a one-layer model).

2. `native_sliding_window_model`: transformers' own sliding window (`sliding_window = L + 1` on every layer:
   Mistral, Mixtral, Qwen2/3 with `use_sliding_window`, Phi-3, Starcoder2, Gemma 2/3 with every layer sliding,
   ...), run through the unpatched code path (`cache_limit=None`), as a second oracle that shares no code with
   cachelimit. It reads every prompt token with the window too, so it matches a bounded run whose prefill is
   windowed (`prefill_chunk_size`) or whose prompt is no longer than L + 1.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from tests.layer_masks import CHUNKED, SLIDING, attention_types, chunk_of, model_masks, native_size


def banded_visibility(
    attention_mask: torch.Tensor,
    limit: int,
    full_attention_spans: Sequence[tuple[int, int]] = (),
    native_window: int | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """[B, T, T] booleans: may the token in column i read the token in column j?

    Every token reads the real tokens among the `limit` columns before it, plus itself (the `limit` positions
    a bounded cache keeps, plus the new token). A token inside one of the `full_attention_spans` (start, end)
    was processed by a multi-token forward that read the whole kept past causally: it reads every real column
    from `start - limit` on (the default prefill is the span (0, prompt_length): full causal attention).
    `native_window` (a model's own `sliding_window`, itself included) and `chunk` (chunked attention: only the
    query's own chunk, counted from the row's first real token) are applied on top.
    A token always reads itself, so pad rows stay finite (their outputs are never compared).
    """
    batch, width = attention_mask.shape
    device = attention_mask.device
    query = torch.arange(width, device=device)[:, None]
    key = torch.arange(width, device=device)[None, :]
    lowest = torch.arange(width, device=device) - limit
    for start, end in full_attention_spans:
        lowest[start:end] = start - limit
    visible = (key <= query) & (key >= lowest[:, None])
    if native_window is not None:
        visible &= key > query - native_window
    visible = visible[None] & attention_mask.bool()[:, None, :]
    if chunk is not None:
        chunks = chunk_of(torch.arange(width, device=device), attention_mask, chunk)
        visible &= chunks[:, :, None] == chunks[:, None, :]
    return visible | torch.eye(width, dtype=torch.bool, device=device)[None]


def real_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Absolute positions: the index of each token among its row's real tokens (as transformers does)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def banded_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, visibility):
    """Logits [B, T, V] of one cache-free forward over `input_ids` where token i reads `visibility[:, i]` (a dict:
    one visibility per attention type, handed to hybrid models as the dict of masks their modeling code accepts, with
    the padding mask for their recurrent layers)."""
    if not isinstance(visibility, dict):
        (kind,) = attention_types(model.config)
        visibility = {kind: visibility}
    mask = model_masks(model, visibility, attention_mask)
    output = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=real_positions(attention_mask),
        use_cache=False,
    )
    return output.logits


def extended_mask(prompt_mask: torch.Tensor, sequences: torch.Tensor) -> torch.Tensor:
    """The prompt's mask followed by ones for every generated column (generated tokens are real)."""
    new = sequences.shape[1] - prompt_mask.shape[1]
    return torch.cat([prompt_mask, prompt_mask.new_ones(sequences.shape[0], new)], dim=1)


def generated_step_logits(
    model,
    sequences: torch.Tensor,
    prompt_mask: torch.Tensor,
    limit: int,
    window_prefill: bool = False,
    full_attention_spans: Sequence[tuple[int, int]] | None = None,
    every_layer_reads: str | None = None,
) -> torch.Tensor:
    """Reference float32 logits [B, new, V] for every generation step of `sequences` (teacher forced): step t
    predicts generated token t, as `generate(output_logits=True)` reports it.

    Each attention type of a hybrid model reads its own visibility (`type_visibility`); its recurrent layers read
    every token, as they do in the bounded run. `every_layer_reads="full_attention"` (or another type) gives every
    layer of a hybrid model that type's window: a deliberately wrong reference, for tests to show theirs can fail.

    The prompt is read with full attention unless `window_prefill` (a chunked prefill obeys the window);
    `full_attention_spans` overrides that (e.g. new prompt tokens appended to a returned cache). A model's
    own `sliding_window` applies on top, as it does in the model.
    """
    prompt = prompt_mask.shape[1]
    mask = extended_mask(prompt_mask, sequences)
    if full_attention_spans is None:
        full_attention_spans = [] if window_prefill else [(0, prompt)]
    types = attention_types(model.config)
    visibility = {kind: type_visibility(model.config, kind, mask, limit, full_attention_spans) for kind in types}
    if every_layer_reads is not None:
        visibility = dict.fromkeys(visibility, visibility[every_layer_reads])
    return banded_logits(model, sequences, mask, visibility)[:, prompt - 1 : -1].float()


def type_visibility(config, kind: str, mask: torch.Tensor, limit: int, spans) -> torch.Tensor:
    """The banded visibility of one attention type (each type of a hybrid reads its own): full attention keeps the
    limit; a sliding window W keeps min(L, W - 1) and applies W; chunks of C keep min(L, C - 1) and apply the chunk."""
    size = native_size(config, kind)
    if kind == SLIDING:
        return banded_visibility(mask, min(limit, size - 1), spans, native_window=size)
    if kind == CHUNKED:
        return banded_visibility(mask, min(limit, size - 1), spans, chunk=size)
    return banded_visibility(mask, limit, spans)


def uniform_native_window(config) -> int | None:
    """The model's own window when every layer slides (read from `config.layer_types` where the config has it,
    else from `sliding_window` alone, as transformers' modeling code does); None when no layer slides."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        kinds = set(layer_types)
        if kinds == {"full_attention"}:
            return None
        if kinds != {"sliding_attention"}:
            raise ValueError(f"the banded reference serves one attention type for all layers, got {sorted(kinds)}")
    return window if isinstance(window, int) and window > 0 else None


def native_sliding_window_model(model, window: int, **config_overrides):
    """A copy of `model` (same class, weights, attention implementation, dtype and generation config) whose
    config gives EVERY layer transformers' native `sliding_window = window`: every token reads at most `window`
    keys, itself included. `config_overrides` are the family's switches for it (Qwen2: `use_sliding_window`,
    `max_window_layers=0`); `layer_types`, where the config has them, become all sliding. Generate with it with
    `cache_limit=None` so only transformers' own code runs."""
    config = copy.deepcopy(model.config)
    for name, value in config_overrides.items():
        if name != "layer_types":  # set below, for every layer
            setattr(config, name, value)
    config.sliding_window = window
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    oracle = type(model)(config)
    oracle.load_state_dict(model.state_dict())
    oracle.set_attn_implementation(model.config._attn_implementation)
    oracle = oracle.to(model.dtype).eval()
    oracle.generation_config = copy.deepcopy(model.generation_config)
    if uniform_native_window(oracle.config) != window:
        raise ValueError(f"{type(model).__name__}: the overrides {config_overrides} do not make every layer slide")
    return oracle
