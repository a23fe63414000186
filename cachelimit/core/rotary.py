"""Move cached RoPE keys to other positions with the model's own rotary embedding (no copied math).

RoPE is a rotation per frequency pair, so rotating a key written at position p by `shift` more positions gives exactly
the key written at p + shift. That is how sinks reach their StreamingLLM positions without re-rotating the cache:
window keys keep their absolute positions and only the `S` sink keys move (see `core.window_plan`). Finding a model's
rotary module and its `apply_rotary_pos_emb` is the integration's job (`hf.layout`); this module only rotates.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: RoPE types whose frequencies depend on the sequence length: a shift would not compose with them.
LENGTH_DEPENDENT = frozenset({"dynamic", "longrope"})


class RotaryShift:
    """Rotates already-rotated keys by a further `shift` positions.

    `cos_sin_at(probe, positions)` is the model's rotary module (its frequencies, its scaling rules) and
    `apply_rotary_pos_emb` its modeling file's rotation. The attention-scaling factor some RoPE variants fold into
    cos/sin is divided out, since the cached key already carries it: it is read as the cosine at position 0 (cos 0 =
    1), so no variant's attribute names are needed. Partial rotary moves only the rotary dims: the first
    `cos.shape[-1]` dims of a head (GPT-NeoX, Phi), or the last ones with `rotary_at_end` (DeepSeek's MLA keys are
    `[nope | rope]`). `half_tables`: the tables hold one entry per rotated pair (GPT-OSS's halves, complex frequencies),
    so they cover twice their width. `rotates`: which cached tensor carries the positions, "keys" or "values" (the
    MLA cache of recent transformers stores the compressed latent as keys and the shared rotary key as values).
    """

    def __init__(
        self,
        cos_sin_at: Callable,
        apply_rotary_pos_emb: Callable,
        dtype: torch.dtype,
        rope_type: str,
        rotary_at_end: bool = False,
        half_tables: bool = False,
        rotates: str = "keys",
    ):
        if rope_type in LENGTH_DEPENDENT:
            raise ValueError(
                f"`num_sink_tokens` is not supported with rope_type={rope_type!r}: its frequencies change with the "
                "sequence length, so sink keys cannot be moved exactly. Use num_sink_tokens=0 (a plain window)."
            )
        self.cos_sin_at = cos_sin_at
        self.apply_rotary_pos_emb = apply_rotary_pos_emb
        self.dtype = dtype
        self.rope_type = rope_type
        self.rotary_at_end = rotary_at_end
        self.half_tables = half_tables
        if rotates not in ("keys", "values"):
            raise ValueError(f"RotaryShift.rotates must be 'keys' or 'values', got {rotates!r}.")
        self.rotates = rotates
        self._scaling: float | None = None

    def _raw(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probe = torch.empty(0, dtype=torch.float32, device=positions.device)
        return self.cos_sin_at(probe, positions)

    def prime(self, device: torch.device) -> None:
        """Read the attention-scaling factor now, in eager code, if it is not known yet: a float read from a tensor
        inside a compiled forward would break its graph (`cos_sin` may then run inside one)."""
        if self._scaling is None:
            self._scaling = float(self._raw(torch.zeros(1, 1, dtype=torch.long, device=device))[0][0, 0, 0])

    def cos_sin(self, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for a [batch, n] tensor of position shifts."""
        self.prime(shift.device)
        cos, sin = self._raw(shift)
        return (cos / self._scaling).to(self.dtype), (sin / self._scaling).to(self.dtype)

    def apply(self, keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate [batch, heads, n, dim] keys by the shifts `cos_sin` was given (only the rotary dims)."""
        rotary, dims = cos.shape[-1] * (2 if self.half_tables else 1), keys.shape[-1]
        if rotary == dims:
            return self.apply_rotary_pos_emb(keys, keys, cos, sin)[1]
        if self.rotary_at_end:
            still, moving = keys[..., : dims - rotary], keys[..., dims - rotary :]
            return torch.cat([still, self.apply_rotary_pos_emb(moving, moving, cos, sin)[1]], dim=-1)
        moving, still = keys[..., :rotary], keys[..., rotary:]
        return torch.cat([self.apply_rotary_pos_emb(moving, moving, cos, sin)[1], still], dim=-1)
