"""Independent references for attention sinks (`num_sink_tokens=S` with `cache_limit=L`).

Neither reference uses `cachelimit`'s step plan or cache; both let the unmodified model compute attention.

GPT-2 (learned absolute positions, sinks keep their written positions): ONE full-sequence forward without a
cache, with an explicit visibility matrix and explicit positions `(mask.cumsum(-1) - 1).clamp(min=0)`. Query `i`
reads key `j <= i` (a real token) if `j` is in its window (the last `L - S` columns before it), or is one of the
row's first `S` real tokens, or (for a query of a multi-token full-attention forward starting at column `s`)
`j >= s - (L - S)`, i.e. the kept past plus everything new. It always reads itself, so pad queries stay finite.

RoPE (llama, mistral): `StreamingReference` does it the original StreamingLLM way, one forward per step:
- forward hooks on every layer's `k_proj` / `v_proj` record each token's *un-rotated* key and its value at the
  moment the token is processed (so later layers keep the keys computed from what the token attended to then;
  llama and mistral apply nothing between `k_proj` and the rotation);
- before each forward the kept tokens (the first `S` tokens + the most recent `L - S`) are put in a fresh
  transformers `DynamicCache`, every key rotated (with the model's own `rotary_emb` and its modeling module's
  `apply_rotary_pos_emb`) to its *cache-relative* position: the kept tokens in order sit at 0, 1, 2, ...;
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

from cachelimit.compat import CACHE_ARGUMENT
from cachelimit.utils.masks import attention_mask_for


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
def gpt2_reference_logits(
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


class StreamingReference:
    """StreamingLLM for one unpadded row of a RoPE model (llama, mistral); see the module docstring."""

    def __init__(self, model, limit: int, num_sinks: int, cache_relative: bool = True):
        # Raw keys are rotated with the model's own rotary module, attention factor (YaRN) included, as the
        # model's attention does to every key it caches.
        rotary = model.model.rotary_emb
        self.model = model
        self.cache_relative = cache_relative  # False: keys keep absolute positions (only to prove the tests can fail)
        self.limit, self.num_sinks = limit, num_sinks
        self.rotary = rotary
        self.apply_rotary_pos_emb = sys.modules[type(model.model).__module__].apply_rotary_pos_emb
        config = model.config
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        layers = model.model.layers
        self.raw_keys: list[list[torch.Tensor]] = [[] for _ in layers]  # per layer: [1, kv_heads, n, head_dim]
        self.values: list[list[torch.Tensor]] = [[] for _ in layers]
        self.seen = 0
        self._recording = False  # only the reference's own forwards are recorded
        self._hooks = []
        for index, layer in enumerate(layers):
            attention = layer.self_attn
            self._hooks.append(attention.k_proj.register_forward_hook(self._recorder(self.raw_keys[index])))
            self._hooks.append(attention.v_proj.register_forward_hook(self._recorder(self.values[index])))

    def _recorder(self, store: list[torch.Tensor]):
        def record(module, args, output):
            if not self._recording:
                return
            batch, length = output.shape[:2]
            store.append(output.view(batch, length, -1, self.head_dim).transpose(1, 2))

        return record

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def kept_indices(self) -> list[int]:
        """Tokens kept between steps: the first S and the most recent L - S (in order)."""
        recent_start = max(0, self.seen - (self.limit - self.num_sinks))
        return sorted(set(range(min(self.num_sinks, self.seen))) | set(range(recent_start, self.seen)))

    def _rotate(self, raw_keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(raw_keys, positions[None])
        return self.apply_rotary_pos_emb(raw_keys, raw_keys, cos, sin)[1]

    @torch.no_grad()
    def feed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run `tokens` ([1, k]) against the kept cache; returns their logits [k, V]."""
        kept = torch.tensor(self.kept_indices(), dtype=torch.long)
        cache = DynamicCache()
        if len(kept):
            relative = torch.arange(len(kept)) if self.cache_relative else kept
            for layer, (keys, values) in enumerate(zip(self.raw_keys, self.values, strict=True)):
                raw = torch.cat(keys, dim=2).index_select(2, kept)
                cache.update(self._rotate(raw, relative), torch.cat(values, dim=2).index_select(2, kept), layer)
        first = len(kept) if self.cache_relative else self.seen
        positions = torch.arange(first, first + tokens.shape[1])[None]
        self._recording = True
        try:
            out = self.model(input_ids=tokens, position_ids=positions, use_cache=True, **{CACHE_ARGUMENT: cache})
        finally:
            self._recording = False
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
