"""Independent references for attention sinks (`num_sink_tokens=S` with `cache_limit=L`).

Neither reference uses `cachelimit`'s step plan or cache; both let the unmodified model compute attention.

Learned absolute positions (GPT-2, OPT: sinks keep their written positions): ONE full-sequence forward without a
cache, with an explicit visibility matrix and explicit positions `(mask.cumsum(-1) - 1).clamp(min=0)`. Query `i`
reads key `j <= i` (a real token) if `j` is in its window (the last `L - S` columns before it), or is one of the
row's first `S` real tokens, or (for a query of a multi-token full-attention forward starting at column `s`)
`j >= s - (L - S)`, i.e. the kept past plus everything new. It always reads itself, so pad queries stay finite.

RoPE (every RoPE family): `StreamingReference` does it the original StreamingLLM way, one forward per step:
- every token's *un-rotated* key and its value are recorded at the moment the token is processed (so later
  layers keep the keys computed from what the token attended to then): the model's own
  `apply_rotary_pos_emb` (looked up by the attention at call time in its modeling module) is wrapped to
  record the key it is given, i.e. after whatever the family applies first (q/k norms in Qwen3, OLMo 2,
  Gemma 3; the split of a fused qkv projection in GPT-NeoX, Phi-3; the rotary slice in Phi), and a recording
  cache pairs it with the layer that stores it. A layer that stores a key without rotating it (SmolLM3's
  NoPE layers) records the stored key itself;
- the rotation of each layer at each position is read from the model's own forward too: one probe forward
  over positions 0..N-1 records the cos/sin every layer's `apply_rotary_pos_emb` receives (Gemma 3's local
  and global bases, partial rotary dims), so no rotary module is looked up here;
- before each forward the kept tokens (the first `S` tokens + the most recent `L - S`) are put in a fresh
  transformers `DynamicCache`, every key rotated (with those cos/sin and the model's `apply_rotary_pos_emb`)
  to its *cache-relative* position: the kept tokens in order sit at 0, 1, 2, ...;
- the new tokens get `position_ids = number of cached keys + 0, 1, ...`, and the model's own forward computes
  attention over that cache (causal among the new tokens);
- afterwards the tokens beyond the kept set are dropped.
A prompt that is read at once is thus a normal forward; running the prompt token by token gives the
window-prefill (chunked prefill) semantics where every prompt query sees the sinks plus its own window.
The library instead keeps window keys at their absolute positions and re-rotates only the sink keys; the two
agree because attention scores depend on query/key position differences only.
"""

from __future__ import annotations

import sys

import torch
from transformers import DynamicCache

from cachelimit.hf.compat import CACHE_ARGUMENT
from cachelimit.hf.masks import transformers_mask as attention_mask_for


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
    mask = attention_mask_for(model.config, visible, model.dtype)
    out = model(input_ids=sequences, attention_mask=mask, position_ids=explicit_positions(attention_mask))
    return out.logits


class _RecordingCache(DynamicCache):
    """A plain `DynamicCache` that reports what every layer stores during the reference's own forwards."""

    def __init__(self, on_update):
        super().__init__()
        self.on_update = on_update

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self.on_update is not None:
            self.on_update(layer_idx, key_states, value_states)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class StreamingReference:
    """StreamingLLM for one unpadded row of a RoPE model (any family); see the module docstring."""

    def __init__(self, model, limit: int, num_sinks: int, cache_relative: bool = True):
        self.model = model
        self.cache_relative = cache_relative  # False: keys keep absolute positions (only to prove the tests can fail)
        self.limit, self.num_sinks = limit, num_sinks
        self.modeling = sys.modules[type(model.base_model).__module__]
        self.apply_rotary_pos_emb = self.modeling.apply_rotary_pos_emb
        layers = model.config.num_hidden_layers
        self.raw_keys: list[list[torch.Tensor]] = [[] for _ in range(layers)]  # per layer: [1, kv_heads, n, dim]
        self.values: list[list[torch.Tensor]] = [[] for _ in range(layers)]
        self.rotary_dims: list[int | None] = [None] * layers  # dims the layer hands to apply_rotary_pos_emb
        self.tables: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * layers
        self.table_length = 0
        self.seen = 0
        self._pending = None  # (key, cos, sin) given to apply_rotary_pos_emb since the last cache update

    def close(self) -> None:
        """Nothing to release: the reference wraps `apply_rotary_pos_emb` only during its own forwards."""

    def _recording_apply(self, q, k, cos, sin, *args, **kwargs):
        self._pending = (k, cos, sin)
        return self.apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs)

    def _forward(self, cache: _RecordingCache, module=None, **inputs):
        """One forward of `module` (the model) with `apply_rotary_pos_emb` recorded (and restored afterwards)."""
        self._pending = None
        self.modeling.apply_rotary_pos_emb = self._recording_apply
        try:
            return (module or self.model)(use_cache=True, **{CACHE_ARGUMENT: cache}, **inputs)
        finally:
            self.modeling.apply_rotary_pos_emb = self.apply_rotary_pos_emb

    def _record_step(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        if self._pending is not None:
            raw, cos, sin = self._pending
            dims = raw.shape[-1]
            keys = torch.cat([self._unrotated(raw, keys[..., :dims], cos, sin), keys[..., dims:]], dim=-1)
            self.rotary_dims[layer] = dims
        self._pending = None
        self.raw_keys[layer].append(keys)
        self.values[layer].append(values)

    def _unrotated(
        self, raw: torch.Tensor, stored: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        """The key a layer rotated, as it would be at position 0. Usually the key `apply_rotary_pos_emb` was given.
        A model that processes the rotated key further before storing it (nanochat: a norm without weights, which
        commutes with the rotation) stores something else: then the stored key is rotated back, with the inverse
        rotation (cos, -sin) divided by the squared scaling some RoPE variants fold into cos/sin (cos^2 + sin^2 of a
        frequency pair)."""
        if torch.allclose(self.apply_rotary_pos_emb(raw, raw, cos, sin)[1], stored, atol=1e-6, rtol=1e-5):
            return raw
        back = self.apply_rotary_pos_emb(stored, stored, cos, -sin)[1]
        return back / (cos[..., :1] ** 2 + sin[..., :1] ** 2).unsqueeze(1)

    def _record_table(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        if self._pending is not None:
            _, cos, sin = self._pending
            self.tables[layer] = (cos, sin)
        self._pending = None

    def _ensure_tables(self, length: int) -> None:
        """cos/sin of every layer at positions 0..length-1, as the model's own forward computes them."""
        if length <= self.table_length:
            return
        length = max(length, 2 * self.table_length, 64)
        self.tables = [None] * len(self.tables)
        tokens = torch.ones(1, length, dtype=torch.long)
        with torch.no_grad():
            # the decoder alone: hooks on the model (tests recording its outputs) never see this probe
            cache = _RecordingCache(self._record_table)
            self._forward(cache, self.model.base_model, input_ids=tokens, position_ids=torch.arange(length)[None])
        self.table_length = length

    def _rotate(self, layer: int, raw_keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.tables[layer] is None:  # a layer without positions
            return raw_keys
        cos, sin = (table[:, positions] for table in self.tables[layer])
        dims = self.rotary_dims[layer]
        moving = raw_keys[..., :dims]
        rotated = self.apply_rotary_pos_emb(moving, moving, cos, sin)[1]
        return torch.cat([rotated, raw_keys[..., dims:]], dim=-1)

    def kept_indices(self) -> list[int]:
        """Tokens kept between steps: the first S and the most recent L - S (in order)."""
        recent_start = max(0, self.seen - (self.limit - self.num_sinks))
        return sorted(set(range(min(self.num_sinks, self.seen))) | set(range(recent_start, self.seen)))

    @torch.no_grad()
    def feed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run `tokens` ([1, k]) against the kept cache; returns their logits [k, V]."""
        kept = torch.tensor(self.kept_indices(), dtype=torch.long)
        first = len(kept) if self.cache_relative else self.seen
        self._ensure_tables(max(first, self.seen) + tokens.shape[1] + 1)
        cache = _RecordingCache(None)
        if len(kept):
            relative = torch.arange(len(kept)) if self.cache_relative else kept
            for layer, (keys, values) in enumerate(zip(self.raw_keys, self.values, strict=True)):
                raw = torch.cat(keys, dim=2).index_select(2, kept)
                cache.update(self._rotate(layer, raw, relative), torch.cat(values, dim=2).index_select(2, kept), layer)
        cache.on_update = self._record_step
        positions = torch.arange(first, first + tokens.shape[1])[None]
        out = self._forward(cache, input_ids=tokens, position_ids=positions)
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
