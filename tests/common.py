"""Tiny seeded models for the tests: no hub, a few hundred parameters per layer, two or more layers.

Every family's shape comes from its own declaration (`cachelimit.FAMILIES[name].tiny_config`), so a new
family needs nothing here.
"""

from __future__ import annotations

import torch

import cachelimit
from cachelimit import compat
from cachelimit.family import ROPE

VOCAB = 61
PAD = 0


def build_tiny_model(
    family: str,
    attn_implementation: str = "sdpa",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    layers: int = 2,
    **config_overrides,
):
    """A randomly initialised (seeded) model of `family`, in eval mode, patched, with no EOS so runs are never
    cut short (tests that want EOS set it themselves). `layers=N` sets the depth (default 2)."""
    cachelimit.patch(family)
    declaration = cachelimit.FAMILIES[family]
    config = declaration.tiny(layers, VOCAB, **config_overrides)
    config._attn_implementation = attn_implementation  # at construction: 4.x cannot switch StableLM's afterwards
    torch.manual_seed(seed)
    model = declaration.model_classes[0](config)
    if model.config._attn_implementation != attn_implementation:
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


class FamilyTestBase:
    """What every family test reads from the family's declaration (`cachelimit.FAMILIES[family]`)."""

    family: str

    @property
    def declaration(self) -> cachelimit.Family:
        return cachelimit.FAMILIES[self.family]

    @property
    def uses_rope(self) -> bool:
        return self.declaration.positions == ROPE

    def require_attention(self, attn: str) -> None:
        if attn not in self.declaration.attention:
            self.skipTest(f"{self.family} runs with attention {self.declaration.attention} only (transformers)")


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def kv_heads(config) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def skip_where_sinks_are_refused(test, model: torch.nn.Module) -> None:
    """Skip a sink test on a model whose sinks this transformers cannot serve (refused: `test_bad_input`)."""
    if compat.has_separate_local_rotary(model):
        test.skipTest("transformers 4.x Gemma 3 has a second rotary module for its sliding layers: sinks need 5.0.0")
