"""Move cached RoPE keys to other positions with the model's own rotary embedding (no copied math)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch


class RotaryShift:
    """Rotates already-rotated keys by a further `shift` positions.

    RoPE is a rotation per frequency pair, so rotating a key written at position p by `shift` gives exactly the
    key written at p + shift. The cos/sin come from the model's rotary module (its frequencies, its scaling
    rules); the attention-scaling factor some RoPE variants fold into cos/sin is divided out, since the
    cached key already carries it. Only RoPE types with position-independent frequencies compose this way.
    """

    #: RoPE types whose frequencies depend on the sequence length: a shift would not compose with them.
    LENGTH_DEPENDENT = frozenset({"dynamic", "longrope"})

    def __init__(self, rotary_embedding: torch.nn.Module, apply_rotary_pos_emb: Callable, dtype: torch.dtype):
        rope_type = getattr(rotary_embedding, "rope_type", "default")
        if rope_type in self.LENGTH_DEPENDENT:
            raise ValueError(
                f"`num_sink_tokens` is not supported with rope_type={rope_type!r}: its frequencies change with the "
                "sequence length, so sink keys cannot be moved exactly. Use num_sink_tokens=0 (a plain window)."
            )
        self.rotary_embedding = rotary_embedding
        self.apply_rotary_pos_emb = apply_rotary_pos_emb
        self.dtype = dtype
        self.scaling = float(getattr(rotary_embedding, "attention_scaling", 1.0))

    def cos_sin(self, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for a [batch, n] tensor of position shifts."""
        probe = torch.empty(0, dtype=torch.float32, device=shift.device)
        cos, sin = self.rotary_embedding(probe, shift)
        return (cos / self.scaling).to(self.dtype), (sin / self.scaling).to(self.dtype)

    def apply(self, keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate [batch, heads, n, dim] keys by the shifts `cos_sin` was given."""
        return self.apply_rotary_pos_emb(keys, keys, cos, sin)[1]


def rotary_from(modeling_module: str) -> Callable[[torch.nn.Module], RotaryShift]:
    """`Family.rotary` for a RoPE family whose modeling module defines `apply_rotary_pos_emb` and whose
    decoder keeps its rotary module at `model.model.rotary_emb` (the layout of transformers' Llama-like models)."""

    def rotary_shift(model: torch.nn.Module) -> RotaryShift:
        module = importlib.import_module(modeling_module)
        return RotaryShift(model.model.rotary_emb, module.apply_rotary_pos_emb, model.dtype)

    return rotary_shift
