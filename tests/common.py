"""Tiny seeded models for the tests: no hub, a few hundred parameters per layer, two or more layers."""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

import cachelimit

VOCAB = 61
PAD = 0

_SHAPES = {
    "gpt2": (GPT2LMHeadModel, GPT2Config, {"n_embd": 32, "n_head": 4, "n_positions": 256}),
    "llama": (LlamaForCausalLM, LlamaConfig, {}),
    "mistral": (MistralForCausalLM, MistralConfig, {"sliding_window": None}),
}
_ROPE_SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
}


def _build(family: str, layers: int = 2, **overrides):
    model_class, config_class, shape = _SHAPES[family]
    depth = {"n_layer": layers} if family == "gpt2" else {"num_hidden_layers": layers, **_ROPE_SHAPE}
    return model_class(config_class(**{"vocab_size": VOCAB, **depth, **shape, **overrides}))


def build_tiny_model(
    family: str,
    attn_implementation: str = "sdpa",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    **config_overrides,
):
    """A randomly initialised (seeded) model of `family`, in eval mode, patched, with no EOS so runs are never
    cut short (tests that want EOS set it themselves). `layers=N` sets the depth (default 2)."""
    cachelimit.patch(family)
    torch.manual_seed(seed)
    model = _build(family, **config_overrides)
    model.set_attn_implementation(attn_implementation)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD
    model.generation_config.bos_token_id = None
    return model


def left_padded_batch(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random prompts of the given real lengths, left padded with PAD to the longest (ids never equal PAD)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, width - length :] = torch.randint(1, VOCAB, (length,), generator=generator)
        mask[row, width - length :] = 1
    return ids, mask
