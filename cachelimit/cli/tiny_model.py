"""The built-in tiny model: a small seeded Llama and a byte-level tokenizer, both built in code.

Why it exists: the command line must show the cache at work on any machine, offline, in seconds. Nothing is
downloaded; the weights are random (seeded, so every run is the same), so the text is noise by design. Only the
cache matters here, and it is shaped like a real Llama's: 4 layers of 4 key/value heads of 32 dimensions.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HEADER = "built-in tiny model with random weights: the text is noise; watch the cache"
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
WEIGHT_SEED = 0

SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1 << 16,
}


def _byte_to_char() -> list[str]:
    """The byte-level alphabet of GPT-2 style tokenizers (what `pre_tokenizers.ByteLevel` maps bytes to):
    printable Latin-1 bytes stand for themselves; the others are moved, in byte order, to code points 256 and
    up, so every byte is one visible character and one token."""
    keeps_itself = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, moved = [], 0
    for byte in range(256):
        if byte in keeps_itself:
            chars.append(chr(byte))
        else:
            chars.append(chr(256 + moved))
            moved += 1
    return chars


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Token id b < 256 is the byte b (any text round-trips); the special tokens follow at 256, 257, 258."""
    vocab = {char: byte for byte, char in enumerate(_byte_to_char())}
    backend = Tokenizer(BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    # a causal LM takes no token_type_ids (transformers 4.x's default `model_input_names` has them)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_input_names=["input_ids", "attention_mask"], **SPECIAL_TOKENS
    )
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    return tokenizer


def printable_token_ids() -> list[int]:
    """Printable ASCII and newline: what the tiny model may emit, so its noise cannot drive the terminal
    (no escape sequences, no carriage returns) and newlines keep the streamed lines short."""
    return [ord("\n"), *range(ord(" "), ord("~") + 1)]


def build_tiny_model(dtype: torch.dtype = torch.float32) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """The tiny Llama (seeded random weights, eval mode) and its tokenizer.

    It never stops early (no EOS) and only emits `printable_token_ids`, so a run of N tokens is N tokens.
    """
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SHAPE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        model = LlamaForCausalLM(config)
    model = model.to(dtype).eval()
    allowed = set(printable_token_ids())
    generation = model.generation_config
    generation.eos_token_id = None
    generation.bos_token_id = tokenizer.bos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    generation.suppress_tokens = [token for token in range(len(tokenizer)) if token not in allowed]
    return model, tokenizer
