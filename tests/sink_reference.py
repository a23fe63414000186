"""Independent references for attention sinks (`num_sink_tokens=S` with `cache_limit=L`).

Neither reference uses `cachelimit`'s step plan or cache; both let the unmodified model compute attention.

Learned absolute positions (GPT-2, OPT: sinks keep their written positions): ONE full-sequence forward without a
cache, with an explicit visibility matrix and explicit positions `(mask.cumsum(-1) - 1).clamp(min=0)`. Query `i`
reads key `j <= i` (a real token) if `j` is in its window (the last `L - S` columns before it), or is one of the
row's first `S` real tokens, or (for a query of a multi-token full-attention forward starting at column `s`)
`j >= s - (L - S)`, i.e. the kept past plus everything new. It always reads itself, so pad queries stay finite.

RoPE (every RoPE family, hybrids included): `StreamingReference` does it the original StreamingLLM way, one forward
per step:
- every token's key and value are recorded as the model stores them, with the position they were written at, at
  the moment the token is processed (so later layers keep the keys computed from what the token attended to then);
- each attention type keeps its own set (StreamingLLM over what the type keeps: the first `S` tokens and the most
  recent `L_t - S`, with `L_t = L` for full attention, `min(L, W - 1)` under a sliding window `W`, `min(L, S + C - 1)`
  under chunks of `C`), and each type gets its own *position frame*: its kept keys sit at consecutive positions ending
  just before one query position `P` shared by all types (`P` = the longest kept set), since RoPE scores depend only
  on distances; the keys are moved there from where they were written;
- a key is moved with the family's rotation (`cachelimit.hf.layout`'s finder for the family: the one piece of the
  library the reference uses), but only after the reference has checked it against the model itself: two forwards
  over the same tokens at positions `0..n-1` and `d..d+n-1` must store keys that the rotation by `d` maps onto
  each other (RoPE layers), or equal keys (layers without positions: Cohere 2's full layers, NoPE layers); a wrong
  rotation, or a rotating layer taken for a NoPE one, fails there;
- the kept keys go into fresh attention layers of a transformers `DynamicCache` built from the config; recurrent
  layers (linear attention, SSM, short convolutions) keep their own state across the steps, untouched;
- the new tokens get `position_ids = P + 0, 1, ...`, and the model's own forward computes attention over that cache:
  a model with one attention type builds its own causal mask; a hybrid gets one mask per type, in which a query
  reads its type's kept keys and the new tokens before it, under the type's own pattern (a sliding window applies to
  everything but the sinks, a chunk to everything, sinks included, by true positions);
- afterwards the tokens beyond the kept sets are dropped.
Llama 4's NoPE layers scale their queries by a temperature of the position, which transformers reads from the
cache length, i.e. the columns seen (the true position of an unpadded row; under left padding the pads count too):
the reference's cache reports the columns its row has seen in its batch, as a bounded cache does.
A prompt read at once is a normal forward; read token by token, it gives the window-prefill semantics. (The library
instead re-rotates only the sink keys; the two agree because RoPE scores depend on position differences only.)
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, cache_utils
from transformers.cache_utils import DynamicLayer

from cachelimit.hf.compat import CACHE_ARGUMENT
from tests.layer_masks import (
    CHUNKED,
    LAYER_TYPES,
    SLIDING,
    attention_types,
    config_layer_types,
    kept_limit,
    model_masks,
    native_size,
    takes_one_mask,
)

#: transformers' layers that keep nothing, and its recurrent layers (absent from older releases)
DummyLayers = tuple(filter(None, [getattr(cache_utils, "DummyLayer", None)]))
LinearAttentionLayers = tuple(filter(None, [getattr(cache_utils, "LinearAttentionCacheLayerMixin", None)]))


def explicit_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Real-token index of every column (pads get 0), as transformers derives it under left padding."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def sink_visibility(
    attention_mask: torch.Tensor,
    limit: int,
    num_sinks: int,
    full_attention_spans: list[tuple[int, int]],
) -> torch.Tensor:
    """[B, T, T] booleans: which keys each query reads under `cache_limit=limit, num_sink_tokens=num_sinks`.

    `full_attention_spans` are the column ranges `[start, end)` read by one multi-token full-attention forward
    (the default prefill is `[(0, prompt_width)]`); every other column was read in window mode.
    """
    real = attention_mask.bool()
    batch, width = real.shape
    columns = torch.arange(width)
    recent = limit - num_sinks
    lowest = columns - recent
    for start, end in full_attention_spans:
        lowest[start:end] = start - recent
    query, key = columns[:, None], columns[None, :]
    in_window = (key <= query) & (key >= lowest[:, None])
    first_real = explicit_positions(attention_mask) < num_sinks  # [B, T]: among the row's first S real tokens
    is_sink = (first_real & real)[:, None, :] & (key <= query)[None]
    visible = real[:, None, :] & (in_window[None] | is_sink)
    return visible | torch.eye(width, dtype=torch.bool)[None]


@torch.no_grad()
def banded_sink_logits(
    model,
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    limit: int,
    num_sinks: int,
    full_attention_spans: list[tuple[int, int]],
) -> torch.Tensor:
    """Logits [B, T, V] of one full-sequence forward with the banded + sink visibility."""
    visible = sink_visibility(attention_mask, limit, num_sinks, full_attention_spans)
    mask = model_masks(model, dict.fromkeys(attention_types(model.config), visible), attention_mask)
    out = model(input_ids=sequences, attention_mask=mask, position_ids=explicit_positions(attention_mask))
    return out.logits


class _RecordingCache(DynamicCache):
    """A transformers `DynamicCache` built from the model's config (its recurrent layers are transformers' own) that
    reports what every attention layer stores, and, where `true_length` is set, reports that as its length."""

    def __init__(self, config, on_update=None):
        super().__init__(config=config)
        self.on_update = on_update
        self.true_length: int | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self.on_update is not None:
            self.on_update(layer_idx, key_states, value_states)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return super().get_seq_length(layer_idx) if self.true_length is None else self.true_length


class StreamingReference:
    """StreamingLLM for one unpadded row of a RoPE model (any family, hybrids included); see the module docstring."""

    SHIFT_CHECK = 7  # positions the rotation check moves its second forward by

    def __init__(self, model, limit: int, num_sinks: int, cache_relative: bool = True, **variants):
        """`left_pads`: the pads before this row in its batch (Llama 4's temperature counts them: see the module
        docstring). `cache_relative=False` (keys keep absolute positions), `every_type_keeps` (one kept count for
        every attention type) and `true_temperature=False` (Llama 4's temperature from the kept cache's length) are
        wrong references, only to prove the tests can fail."""
        self.model = model
        every_type_keeps = variants.pop("every_type_keeps", None)
        self.true_temperature = variants.pop("true_temperature", True)
        self.left_pads = variants.pop("left_pads", 0)
        if variants:
            raise TypeError(f"unknown StreamingReference arguments: {sorted(variants)}")
        self.cache_relative = cache_relative
        self.limit, self.num_sinks = limit, num_sinks
        config = model.config
        self.layer_types = config_layer_types(config)
        self.attention = [LAYER_TYPES[kind][0] for kind in self.layer_types]  # per layer: its attention type or None
        self.kept_limits = {kind: kept_limit(config, kind, limit, num_sinks) for kind in attention_types(config)}
        if every_type_keeps is not None:
            self.kept_limits = dict.fromkeys(self.kept_limits, every_type_keeps)
        layers = len(self.layer_types)
        self.keys: list[list[torch.Tensor]] = [[] for _ in range(layers)]  # per layer: as stored, [1, heads, n, dim]
        self.values: list[list[torch.Tensor]] = [[] for _ in range(layers)]
        self.written: list[list[int]] = [[] for _ in range(layers)]  # per layer: the position each key was written at
        self.moves = self._checked_moves()
        self.cache = _RecordingCache(config)
        self.seen = 0
        self._positions: torch.Tensor | None = None

    def close(self) -> None:
        """Nothing to release (kept for the callers that clean up after a reference)."""

    # ---- the rotation, checked against the model's own keys at shifted positions -------------------------------
    def _stored_keys(self, tokens: torch.Tensor, offset: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        stored = {}
        cache = _RecordingCache(self.model.config, lambda layer, k, v: stored.setdefault(layer, (k, v)))
        positions = torch.arange(offset, offset + tokens.shape[1])[None]
        with torch.no_grad():
            self.model(input_ids=tokens, position_ids=positions, use_cache=True, **{CACHE_ARGUMENT: cache})
        return stored

    def _checked_moves(self) -> list:
        """Per layer, the `RotaryShift` that moves its stored keys (None: its keys carry no positions), after checking
        it on the model itself (module docstring)."""
        from cachelimit.families.table import SERVED_TYPES
        from cachelimit.hf.layout import layer_rotary_kinds, rotary_finder

        family = SERVED_TYPES[self.model.config.model_type]
        finder = rotary_finder(family)
        kinds = layer_rotary_kinds(self.model, family.rotary_layers)
        moves = [None if finder is None or kind is None else finder(self.model, kind) for kind in kinds]
        tokens = torch.arange(1, 13)[None] % (self.model.config.vocab_size - 1) + 1
        at_zero, shifted = self._stored_keys(tokens, 0), self._stored_keys(tokens, self.SHIFT_CHECK)
        for layer, (keys, values) in at_zero.items():
            move = moves[layer]
            expected = {"keys": keys, "values": values}
            if move is not None:
                shift = torch.full((1, tokens.shape[1]), self.SHIFT_CHECK)
                expected[move.rotates] = move.apply(expected[move.rotates], *move.cos_sin(shift))
            for name, tensor in zip(("keys", "values"), shifted[layer], strict=True):
                # float noise grows with depth and size (SmolLM2's last layer: 3e-5 of its largest key)
                if (expected[name] - tensor).abs().max() > 1e-4 * (1 + tensor.abs().max()):
                    raise AssertionError(
                        f"the reference's rotation of layer {layer} ({type(move).__name__}) does not reproduce the "
                        f"{name} the model stores {self.SHIFT_CHECK} positions later"
                    )
        return moves

    # ---- StreamingLLM --------------------------------------------------------------------------------------------
    def kept_indices(self, kind: str | None = None) -> list[int]:
        """Tokens an attention type keeps between steps (the full-attention type by default): the first S and the
        most recent L_t - S, in order."""
        kept = self.kept_limits[kind or next(iter(self.kept_limits))]
        recent_start = max(0, self.seen - (kept - self.num_sinks))
        return sorted(set(range(min(self.num_sinks, self.seen))) | set(range(recent_start, self.seen)))

    def _record(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys[layer].append(keys)
        self.values[layer].append(values)
        self.written[layer].extend(self._positions[0].tolist())

    def _fill(self, query_position: int) -> dict[str, list[int]]:
        """Put every attention layer's kept keys into the cache, in its type's frame ending before `query_position`;
        returns the kept tokens of each type."""
        kept = {kind: self.kept_indices(kind) for kind in self.kept_limits}
        for layer, kind in enumerate(self.attention):
            if kind is None or layer >= len(self.cache.layers) or isinstance(self.cache.layers[layer], DummyLayers):
                continue
            fresh = self.cache.layers[layer]
            if isinstance(fresh, LinearAttentionLayers):  # a hybrid layer: its recurrent state stays
                fresh.keys = fresh.values = None
                fresh.is_initialized = False
            else:
                fresh = self.cache.layers[layer] = DynamicLayer()
            if not self.keys[layer]:
                continue
            index = torch.tensor(kept[kind], dtype=torch.long)
            stored = {
                "keys": torch.cat(self.keys[layer], dim=2).index_select(2, index),
                "values": torch.cat(self.values[layer], dim=2).index_select(2, index),
            }
            move = self.moves[layer]
            if move is not None and self.cache_relative:
                frame = query_position - len(index) + torch.arange(len(index))
                shift = (frame - torch.tensor(self.written[layer])[index])[None]
                stored[move.rotates] = move.apply(stored[move.rotates], *move.cos_sin(shift))
            DynamicLayer.update(fresh, stored["keys"], stored["values"])
        return kept

    def _masks(self, kept: dict[str, list[int]], new: int):
        """One mask per attention type of a hybrid (None: the model builds its own causal mask)."""
        if takes_one_mask(self.model.config):
            return None
        queries = torch.arange(self.seen, self.seen + new)
        visibility = {}
        for kind, columns in kept.items():
            keys = torch.cat([torch.tensor(columns, dtype=torch.long), queries])
            visible = keys[None, :] <= queries[:, None]
            sink = (keys < self.num_sinks) & (keys < self.seen)  # a kept sink (the new tokens are no sinks yet)
            size = native_size(self.model.config, kind)
            if kind == SLIDING:
                visible &= (keys[None, :] > queries[:, None] - size) | sink[None, :]
            if kind == CHUNKED:
                visible &= torch.div(keys[None, :], size, rounding_mode="floor") == torch.div(
                    queries[:, None], size, rounding_mode="floor"
                )
            visibility[kind] = visible[None]
        return model_masks(self.model, visibility, None)

    @torch.no_grad()
    def feed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run `tokens` ([1, k]) against the kept caches; returns their logits [k, V]."""
        longest = max(len(self.kept_indices(kind)) for kind in self.kept_limits)
        first = longest if self.cache_relative else self.seen
        kept = self._fill(first)
        self._positions = torch.arange(first, first + tokens.shape[1])[None]
        self.cache.on_update = self._record
        tuned = getattr(self.model.config, "attn_temperature_tuning", False) and self.true_temperature
        self.cache.true_length = self.left_pads + self.seen if tuned else None
        inputs = {"input_ids": tokens, "position_ids": self._positions, "use_cache": True, CACHE_ARGUMENT: self.cache}
        masks = self._masks(kept, tokens.shape[1])
        if masks is not None:
            inputs["attention_mask"] = masks
        out = self.model(**inputs)
        self.cache.on_update = None
        self.seen += tokens.shape[1]
        return out.logits[0]

    def greedy(
        self, prompt: torch.Tensor, max_new_tokens: int, token_by_token_prefill: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding of a [1, P] prompt: (new tokens [n], logits [n, V] that chose them)."""
        if token_by_token_prefill:
            logits = [self.feed(prompt[:, i : i + 1]) for i in range(prompt.shape[1])][-1][-1]
        else:
            logits = self.feed(prompt)[-1]
        return self.continue_greedy(logits, max_new_tokens)

    def continue_greedy(self, logits: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding from the logits of the last fed token."""
        tokens, all_logits = [], []
        for step in range(max_new_tokens):
            all_logits.append(logits)
            tokens.append(int(logits.argmax()))
            if step + 1 < max_new_tokens:
                logits = self.feed(torch.tensor([[tokens[-1]]]))[-1]
        return torch.tensor(tokens), torch.stack(all_logits)
