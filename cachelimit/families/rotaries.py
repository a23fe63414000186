"""How the families whose rotation is not `apply_rotary_pos_emb(q, k, cos, sin)` move their sink keys, and which of
their layers rotate at all and with which rotary (`Family.rotary`, `Family.rotary_layers`; the defaults are
`hf.layout.rotary_shift` and `hf.layout.default_rotary_kinds`).

Each finder still moves keys with the model's own rotary module and its own modeling file's rotation function; it only
says how that function is called and which cached tensor, and which of its dims, carry the positions.
"""

from __future__ import annotations

import sys
from functools import partial

import torch

from ..core.rotary import RotaryShift
from ..hf.compat import MLA_CACHES_LATENT, decoder_body, rotary_table
from ..hf.layout import default_rotary_kinds, rotary_shift

#: GPT-OSS rotates each head's two halves with tables of half its width
half_tables = partial(rotary_shift, half_tables=True)


SLIDING = "sliding_attention"


def _where(model, rotates: list[bool]) -> list[str | None]:
    """The default rotary kinds (`hf.layout.default_rotary_kinds`) on the layers that rotate, None on the others."""
    return [kind if uses else None for kind, uses in zip(default_rotary_kinds(model), rotates, strict=True)]


def _windowed(config) -> list[bool]:
    """Per layer, whether it has a window: a sliding layer of a config with one."""
    return [kind == SLIDING and config.sliding_window is not None for kind in config.layer_types]


def sliding_layers_rotate(model) -> list[str | None]:
    """Cohere 2, Flint: a layer rotates where it has a window; the full layers carry no positions."""
    return _where(model, _windowed(model.config))


def local_layers_rotate(model) -> list[str | None]:
    """AFMoE: the sliding ("local") layers rotate, whatever the window; the full layers carry no positions."""
    return _where(model, [kind == SLIDING for kind in model.config.layer_types])


def exaone4_layers_rotate(model) -> list[str | None]:
    """EXAONE 4, EXAONE MoE, Kolibri 1: with a sliding window, only the sliding layers apply RoPE; without one, every
    layer does."""
    config = model.config
    return _where(model, [config.sliding_window is None or kind == SLIDING for kind in config.layer_types])


def cohere2_moe_layers_rotate(model) -> list[str | None]:
    """Cohere 2 MoE: as Cohere 2, and its dense prefix layers rotate too where `prefix_dense_sliding_window_pattern`
    is 1 (the attention's `force_rope`)."""
    config = model.config
    forced = [mlp == "dense" and config.prefix_dense_sliding_window_pattern == 1 for mlp in config.mlp_layer_types]
    return _where(model, [a or b for a, b in zip(_windowed(config), forced, strict=True)])


def _base_kind(theta) -> str:
    """The rotary kind of the layers on RoPE base `theta` (Granite SWA), the same for an int and a float base."""
    return repr(float(theta))


def rotary_per_base(model) -> list[str | None]:
    """Granite SWA: each layer rotates with the rotary of its own base (`config.layer_rope_theta`, 0: NoPE), one
    module per distinct base in `model.base_model.rotary_embs`; the kind of a layer names its base."""
    return [_base_kind(theta) if theta else None for theta in model.config.layer_rope_theta]


def base_rotary(model, kind: str | None) -> RotaryShift | None:
    """Granite SWA: the rotary module of the base a kind names (`rotary_per_base`), with its modeling file's
    `apply_rotary_pos_emb`."""
    if kind is None:
        return None
    (rotary,) = (
        module
        for module in decoder_body(model).rotary_embs
        if _base_kind(module.config.rope_parameters["rope_theta"]) == kind
    )
    apply = sys.modules[type(rotary).__module__].apply_rotary_pos_emb
    return RotaryShift(rotary, apply, model.dtype, rotary.rope_type)


def every_layer_rotates(model) -> list[str | None]:
    """GPT-J and CodeGen: every layer rotates with the one table (before 5.24 it has no rotary module at the decoder
    body for the default reading to find)."""
    return [""] * model.config.num_hidden_layers


def table_rotary(model, kind: str | None) -> RotaryShift | None:
    """GPT-J and CodeGen: the rotary module returns `(sin, cos)` rows of a sinusoidal table, one entry per rotated
    pair (interleaved), and `apply_rotary_pos_emb(tensor, sin, cos)` rotates one [batch, positions, heads, dims]
    tensor; keys are cached as [batch, heads, positions, dims]. A table has rows for positions 0.. only (a negative
    index would silently read its end), so a shift back by d reads row d with the sine negated."""
    if kind is None:
        return None
    rows = rotary_table(model)
    apply = sys.modules[type(model).__module__].apply_rotary_pos_emb

    def cos_sin_at(probe, positions):
        sin, cos = rows(probe, positions.abs())
        return cos, sin * positions.sign().unsqueeze(-1).to(sin.dtype)

    def rotate(query, key, cos, sin):
        return query, apply(key.transpose(1, 2), sin, cos).transpose(1, 2)

    return RotaryShift(cos_sin_at, rotate, model.dtype, "default", half_tables=True)


def complex_rotary(model, kind: str | None, *, positions_first: bool, **options) -> RotaryShift | None:
    """A model whose rotary module returns complex frequencies and rotates with `apply_rotary_emb(xq, xk, freqs_cis)`
    (Llama 4 on [batch, positions, heads, dims] tensors, `positions_first`; DeepSeek V2 on [batch, heads, positions,
    dims]): the frequencies are split into cos/sin tables of one entry per rotated pair, and put back together to call
    the model's own function."""
    if kind is None:
        return None
    rotary = decoder_body(model).rotary_emb
    apply = sys.modules[type(rotary).__module__].apply_rotary_emb

    def cos_sin_at(probe, positions):
        frequencies = rotary(probe, positions)
        return frequencies.real, frequencies.imag

    def rotate(query, key, cos, sin):
        frequencies = torch.complex(cos.float(), sin.float())
        if positions_first:
            key = key.transpose(1, 2)
        rotated = apply(key, key, frequencies)[1]
        return query, rotated.transpose(1, 2) if positions_first else rotated

    return RotaryShift(cos_sin_at, rotate, model.dtype, rotary.rope_type, half_tables=True, **options)


#: Llama 4: complex frequencies on [batch, positions, heads, dims]
llama4_rotary = partial(complex_rotary, positions_first=True)


def mla_options() -> dict:
    """Where DeepSeek's MLA cache keeps the positions: the values (the shared rotary key, next to the compressed
    latent as keys) from 5.15.0, the rotary end of each `[nope | rope]` key before (`compat.MLA_CACHES_LATENT`)."""
    return {"rotates": "values"} if MLA_CACHES_LATENT else {"rotary_at_end": True}


def deepseek_v2_rotary(model, kind: str | None) -> RotaryShift | None:
    """DeepSeek V2: complex frequencies on [batch, heads, positions, dims], MLA cache."""
    return complex_rotary(model, kind, positions_first=False, **mla_options())


def mla_rotary(model, kind: str | None) -> RotaryShift | None:
    """DeepSeek V3 and the MLA families generated from it (GLM-4 MoE Lite, MiniCPM 3, Youtu, A.X K1): cos/sin tables,
    MLA cache. With `rope_interleave` the model de-interleaves the rotary dims as it
    rotates them, so a cached key's rotary dims are in `rotate_half` order already: moving them further is the plain
    `apply_rotary_pos_emb`, whichever way the model first rotated them."""
    return rotary_shift(model, kind, **mla_options())
