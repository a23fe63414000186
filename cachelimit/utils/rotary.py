"""Move cached RoPE keys to other positions with the model's own rotary embedding (no copied math).

`model_rotary(model)` finds a model's rotary pieces generically: the rotary module transformers' decoders keep
at `model.base_model.rotary_emb`, and the `apply_rotary_pos_emb` of that module's own modeling file. This needs
no family registry, so `BoundedCache.from_model` (cache core) and the families (`cachelimit.family`) share it.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from functools import partial

import torch

from ..compat import decoder_body

#: RoPE types whose frequencies depend on the sequence length: a shift would not compose with them.
LENGTH_DEPENDENT = frozenset({"dynamic", "longrope"})


class RotaryShift:
    """Rotates already-rotated keys by a further `shift` positions.

    RoPE is a rotation per frequency pair, so rotating a key written at position p by `shift` gives exactly the
    key written at p + shift. The cos/sin come from the model's rotary module (its frequencies, its scaling
    rules) and the rotation from its modeling file's `apply_rotary_pos_emb`. The attention-scaling factor some
    RoPE variants fold into cos/sin is divided out, since the cached key already carries it: it is read as the
    cosine at position 0 (cos 0 = 1), so no variant's attribute names are needed. Partial rotary (GPT-NeoX,
    Phi: only the first `cos.shape[-1]` dims of a head rotate) moves only those dims.
    """

    def __init__(self, cos_sin_at: Callable, apply_rotary_pos_emb: Callable, dtype: torch.dtype, rope_type: str):
        if rope_type in LENGTH_DEPENDENT:
            raise ValueError(
                f"`num_sink_tokens` is not supported with rope_type={rope_type!r}: its frequencies change with the "
                "sequence length, so sink keys cannot be moved exactly. Use num_sink_tokens=0 (a plain window)."
            )
        self.cos_sin_at = cos_sin_at
        self.apply_rotary_pos_emb = apply_rotary_pos_emb
        self.dtype = dtype
        self.rope_type = rope_type
        self._scaling: float | None = None

    def _raw(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probe = torch.empty(0, dtype=torch.float32, device=positions.device)
        return self.cos_sin_at(probe, positions)

    def cos_sin(self, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for a [batch, n] tensor of position shifts."""
        if self._scaling is None:
            self._scaling = float(self._raw(torch.zeros(1, 1, dtype=torch.long, device=shift.device))[0][0, 0, 0])
        cos, sin = self._raw(shift)
        return (cos / self._scaling).to(self.dtype), (sin / self._scaling).to(self.dtype)

    def apply(self, keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate [batch, heads, n, dim] keys by the shifts `cos_sin` was given (only the rotary dims)."""
        rotary_dims = cos.shape[-1]
        if rotary_dims == keys.shape[-1]:
            return self.apply_rotary_pos_emb(keys, keys, cos, sin)[1]
        moving = keys[..., :rotary_dims]
        moved = self.apply_rotary_pos_emb(moving, moving, cos, sin)[1]
        return torch.cat([moved, keys[..., rotary_dims:]], dim=-1)


def layer_rotary_kinds(model: torch.nn.Module) -> list[str | None]:
    """Per decoder layer: the rotary variant its keys carry (a layer type such as "sliding_attention" for
    models with one rotary per layer type, "" for a single rotary), or None for a layer without positions
    (SmolLM3's NoPE layers, `config.no_rope_layers[i] == 0`)."""
    config = model.config
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    layers = config.num_hidden_layers
    if rotary is None:
        return [None] * layers
    per_type = "layer_type" in inspect.signature(rotary.forward).parameters
    kinds: list[str | None] = list(config.layer_types) if per_type else [""] * layers
    no_rope = getattr(config, "no_rope_layers", None)
    if no_rope is not None:
        kinds = [kind if uses else None for kind, uses in zip(kinds, no_rope, strict=True)]
    return kinds


def rotary_shift(model: torch.nn.Module, kind: str | None) -> RotaryShift | None:
    """The `RotaryShift` of the layers of rotary `kind` (see `layer_rotary_kinds`); None for layers without
    positions (their sink keys stay as written)."""
    if kind is None:
        return None
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    if rotary is None:
        raise ValueError(
            f"{type(model).__name__} has no rotary embedding at `model.base_model.rotary_emb`; attention sinks "
            "need one to move the sink keys (or use num_sink_tokens=0)."
        )
    apply = getattr(sys.modules[type(rotary).__module__], "apply_rotary_pos_emb", None)
    if apply is None:
        raise ValueError(f"{type(rotary).__module__} has no `apply_rotary_pos_emb` to move sink keys with.")
    rope_type = rotary.rope_type[kind] if kind else rotary.rope_type
    cos_sin_at = partial(rotary, layer_type=kind) if kind else rotary
    return RotaryShift(cos_sin_at, apply, model.dtype, rope_type)


def model_rotary(model: torch.nn.Module) -> RotaryShift | None:
    """The `RotaryShift` of a RoPE model whose layers all use one rotary (one frequency set, every layer);
    None when no layer has positions (nothing to move). Models whose layers differ get one per layer group
    (`cachelimit.layered_cache`)."""
    kinds = set(layer_rotary_kinds(model))
    if len(kinds) != 1:
        found = sorted("no positions" if kind is None else kind or "rotary" for kind in kinds)
        raise ValueError(f"{type(model).__name__} has layers of different positional kinds ({', '.join(found)}).")
    return rotary_shift(model, kinds.pop())
