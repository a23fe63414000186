"""The prompts of the recall benchmark (`bench --recall`) and its scoring rule, built from token ids, no model.

Why token ids and not text: a cell of the benchmark is "a 2,048-token prompt with the key at 50 % depth", so the
prompt is assembled from tokenised pieces (a header, filler, the needle sentence, the question) to exactly the length
asked, and the needle's columns are known exactly: they are what the oracle keep-set pins (`bench.recall_oracle`).

Every trial is deterministic: its key is a 5-digit number drawn from `random.Random(seed, case, length, depth,
trial)`, and the real-text case starts its filler at an offset drawn the same way. Scoring: the first run of digits
in the greedy answer must equal the key exactly (`score_answer`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

HEADER = "There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it.\n\n"
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PASS_KEY_NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
PASS_KEY_QUESTION = "\n\nWhat is the pass key? The pass key is"
TEXT_HEADER = "Read the documentation below. Somewhere in it is a secret number; remember it.\n\n"
TEXT_NEEDLE = " The secret number of the archive is {key}. "
TEXT_QUESTION = "\n\nWhat is the secret number of the archive? The secret number of the archive is"
CHAT_FACT = "Please remember this: my locker code is {key}. I will ask for it later."
CHAT_QUESTION = "What is my locker code? Answer with the number only."
DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Prompt:
    """One trial's prompt: `ids` (exactly the length asked), the key, and the needle's columns [start, end)."""

    ids: list[int]
    key: str
    needle: tuple[int, int]

    @property
    def depth(self) -> float:
        """Where the needle starts, as a fraction of the whole prompt (header and question included)."""
        return self.needle[0] / len(self.ids)


def trial_key(seed: int, *where) -> tuple[str, random.Random]:
    """The 5-digit key of one trial (10000..99999) and the generator it came from (for the trial's other draws)."""
    generator = random.Random(repr((seed, *where)))
    return str(generator.randrange(10_000, 100_000)), generator


def score_answer(answer: str, key: str) -> bool:
    """The scoring rule: the first run of digits in the answer is the key, exactly (`12345` in "is 12345." is
    right; "1234", "123456", "12 345" or no digits are wrong)."""
    found = DIGITS.search(answer)
    return found is not None and found.group() == key


def _tokens(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _filler(unit: list[int], count: int) -> list[int]:
    return (unit * (count // max(1, len(unit)) + 1))[:count]


def place_needle(head, needle, question, filler: list[int], length: int, depth: float) -> Prompt:
    """head + filler with the needle inserted at `depth` of the filler + question, `length` tokens in all.

    Depth is measured in the haystack (the filler between header and question), as pass-key benchmarks do: at
    depth d, round(d * filler tokens) filler tokens come before the needle (0: right after the header, 1: right
    before the question). `filler` must hold at least the room left."""
    room = length - len(head) - len(needle) - len(question)
    if room < 0:
        raise ValueError(f"a prompt of {length} tokens cannot hold its header, needle and question")
    if len(filler) < room:
        raise ValueError(f"the filler text has {len(filler)} tokens, {room} needed")
    before = round(depth * room)
    ids = head + filler[:before] + needle + filler[before:room] + question
    start = len(head) + before
    return Prompt(ids, "", (start, start + len(needle)))


def pass_key_prompt(tokenizer, length: int, depth: float, seed: int, trial: int) -> Prompt:
    """The classic pass-key prompt: repeated filler sentences, the key sentence at `depth`, then the question."""
    key, _ = trial_key(seed, "passkey", length, depth, trial)
    parts = [_tokens(tokenizer, text) for text in (HEADER, PASS_KEY_NEEDLE.format(key=key), PASS_KEY_QUESTION)]
    parts[0] = _bos(tokenizer) + parts[0]
    prompt = place_needle(*parts, _filler(_tokens(tokenizer, FILLER), length), length, depth)
    return Prompt(prompt.ids, key, prompt.needle)


def pass_key_header_length(tokenizer) -> int:
    """How many tokens open every pass-key prompt before its filler (the BOS, if any, and the header): what a run
    keeps as sinks to keep the instruction (`benchmarks/recall_header_probe.py`)."""
    return len(_bos(tokenizer)) + len(_tokens(tokenizer, HEADER))


def text_prompt(tokenizer, text_ids: list[int], length: int, depth: float, seed: int, trial: int) -> Prompt:
    """A needle in real text: `text_ids` (the tokenised default text) from an offset drawn per trial."""
    key, generator = trial_key(seed, "text", length, depth, trial)
    parts = [_tokens(tokenizer, text) for text in (TEXT_HEADER, TEXT_NEEDLE.format(key=key), TEXT_QUESTION)]
    parts[0] = _bos(tokenizer) + parts[0]
    room = length - sum(map(len, parts))
    if len(text_ids) < room:
        raise ValueError(f"the text has {len(text_ids)} tokens, a {length}-token prompt needs {room}")
    offset = generator.randrange(0, len(text_ids) - room + 1)
    prompt = place_needle(*parts, text_ids[offset : offset + room], length, depth)
    return Prompt(prompt.ids, key, prompt.needle)


def _bos(tokenizer) -> list[int]:
    """The BOS the tokenizer adds to a text (if any), counted in the prompt's length: the prompt is what a user's
    `tokenizer(text)` would start with."""
    bos = getattr(tokenizer, "bos_token_id", None)
    ids = tokenizer("a")["input_ids"]
    return [bos] if bos is not None and ids and ids[0] == bos else []


def fact_span(tokenizer, text: str, ids: list[int], fact: str) -> tuple[int, int]:
    """The columns [start, end) of `ids` (the tokens of `text`) whose characters overlap `fact` in `text`
    (the chat case's fact, inside its first turn as the template renders it)."""
    begin = text.index(fact)
    end = begin + len(fact)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"] != list(ids):
        raise ValueError("the turn's tokens are not the tokens of its rendered text")
    inside = [i for i, (a, b) in enumerate(encoded["offset_mapping"]) if a < end and b > begin]
    return inside[0], inside[-1] + 1


def filler_messages(text_ids: list[int], tokenizer, gap: int, size: int, seed: int, trial: int) -> list[str]:
    """The other turns of a chat trial: user messages of `size` tokens of the default text (from an offset drawn per
    trial), enough of them to make `gap` tokens of messages."""
    _, generator = trial_key(seed, "chat", gap, trial)
    turns = max(1, -(-gap // size))
    offset = generator.randrange(0, max(1, len(text_ids) - turns * size))
    return [tokenizer.decode(text_ids[offset + i * size : offset + (i + 1) * size]) for i in range(turns)]
