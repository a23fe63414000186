"""What the example scripts share (imported by them, not run): reading the returned cache under the release's name,
loading the model a script is given, the model arguments, and the line that reports what the cache held.

Kept in one place so each script shows only what it is about; copy this file beside a script you take away.
"""

from __future__ import annotations

import argparse

import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, AutoTokenizer

import cachelimit

# transformers 5.24.0 renamed the cache `cache` (generate's argument and the output's field); before: `past_key_values`
CACHE = "cache" if Version(transformers.__version__).release >= (5, 24) else "past_key_values"


def model_parser(doc: str) -> argparse.ArgumentParser:
    """A parser with the model argument (a folder, a Hub name, or smollm2) and `--tiny`; a script adds its own."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2", help="a model folder or Hub name (default: smollm2)")
    parser.add_argument("--tiny", action="store_true", help="the built-in tiny model (random weights: noise text)")
    return parser


def load(model: str, tiny: bool):
    """(model, tokenizer): the built-in tiny model, SmolLM2 by name (offline), or any folder or Hub name."""
    if tiny:
        from cachelimit.cli.tiny_model import build_tiny_model

        return build_tiny_model()
    if model == "smollm2":
        return cachelimit.load_pretrained("smollm2")
    return AutoModelForCausalLM.from_pretrained(model).eval(), AutoTokenizer.from_pretrained(model)


def held_positions(cache) -> int:
    """Positions per layer the cache holds for the next token."""
    if isinstance(cache, cachelimit.BoundedCache):
        return int(cache.kept_lengths().max())
    return cache.get_seq_length()


def report(out, limit: int) -> None:
    """The line every script prints (tests/test_examples.py reads it): positions held, tokens so far, the limit."""
    held = held_positions(getattr(out, CACHE))
    print(f"cache: {held} positions per layer after {out.sequences.shape[1]} tokens (limit {limit})")
