"""A conversation whose cache is carried from turn to turn: what `cachelimit chat` runs, without its terminal.

Why the cache is carried: re-reading the whole history at every turn costs a forward over everything said so far,
and with a bounded cache it would not even be the same computation (the history would be read with full attention,
not as the window saw it). Each turn instead continues the cache the last turn returned (docs/semantics.md, "Continuation"):
`generate` gets the whole history's ids plus the new turn, with `past_key_values` = that cache, and reads only what
the cache has not seen: the last token of the previous answer and the new turn, in one forward. So the sinks keep the
start of the conversation, and a bounded cache holds the same bytes at turn 1,000 as at turn 10.

How a turn becomes tokens (`TemplateTurns`, `PlainTurns`): the history stays the tokens the model actually read and
wrote, never re-tokenised text; only the new part of each turn is rendered and tokenised. With a chat template that
part is what the template adds to a conversation for one more turn, found by rendering it with and without that turn
(a template that rewrites earlier turns cannot continue a cache: refused when the chat starts). A model without a
template (the built-in tiny model) gets plain "User: ..." / "Assistant: " turns.

A system prompt (`system=`, `cachelimit chat --system`) opens the conversation: the template's system message, or
a plain "System: ..." line. Its tokens are tokenised apart from the first turn's, so they are an exact prefix of the
history whose length `system_tokens()` gives: `--pin-system` pins that many tokens as sinks, so the system prompt
(with the template's prefix) stays in the cache however long the chat goes.
"""

from __future__ import annotations

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ..core.cache import BoundedCache, kv_bytes
from ..families.table import FAMILIES
from ..hf.compat import output_cache, with_cache
from .errors import CliError


class PlainTurns:
    """Turns for a model without a chat template: "User: {message}" and "Assistant: " lines, nothing special."""

    SYSTEM = "System: {system}\n"
    FIRST = "User: {message}\nAssistant: "
    NEXT = "\nUser: {message}\nAssistant: "

    def __init__(self, tokenizer, system: str | None = None):
        self.tokenizer, self.system = tokenizer, system

    def system_tokens(self) -> list[int]:
        """The tokens that open every conversation before its first message (with the model's BOS, if any)."""
        if self.system is None:
            return []
        return self.tokenizer(self.SYSTEM.format(system=self.system))["input_ids"]

    def first(self, message: str) -> list[int]:
        text = self.FIRST.format(message=message)
        if self.system is None:
            return self.tokenizer(text)["input_ids"]  # with the model's BOS, if any
        return self.system_tokens() + self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def after(self, message: str, last_token: int) -> list[int]:
        return self.tokenizer(self.NEXT.format(message=message), add_special_tokens=False)["input_ids"]


class TemplateTurns:
    """Turns in the tokenizer's chat template, rendered as what the template adds for one more exchange."""

    def __init__(self, tokenizer, eos_ids: set[int], system: str | None = None):
        self.tokenizer, self.eos_ids, self.system = tokenizer, eos_ids, system
        self.after("a template check", -1)  # a template that cannot continue a conversation fails now
        self._system_text = self._system_prefix()

    def _with_system(self, messages: list[dict]) -> list[dict]:
        return messages if self.system is None else [{"role": "system", "content": self.system}, *messages]

    def _render(self, messages: list[dict], generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            self._with_system(messages), tokenize=False, add_generation_prompt=generation_prompt
        )

    def _system_prefix(self) -> str:
        """The text the template writes for the system prompt before the first user message ("" without one)."""
        if self.system is None:
            return ""
        prefix = self._render([], generation_prompt=False)
        if self.system not in prefix or not self._render([{"role": "user", "content": "x"}]).startswith(prefix):
            raise CliError(
                "this model's chat template does not write the system prompt ahead of the first message, so it "
                "cannot be given (or pinned) as the start of the conversation"
            )
        return prefix

    def _tokens(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]  # the template writes its own specials

    def system_tokens(self) -> list[int]:
        """The tokens that open every conversation before its first message: the system prompt as the template
        writes it, its own prefix included (none without a system prompt)."""
        return self._tokens(self._system_text) if self._system_text else []

    def first(self, message: str) -> list[int]:
        text = self._render([{"role": "user", "content": message}])
        return self.system_tokens() + self._tokens(text[len(self._system_text) :])

    def after(self, message: str, last_token: int) -> list[int]:
        """The text the template adds after an answer for the next user `message` (closing the answer's turn, unless
        its last token, an end-of-turn token the template writes itself, already did)."""
        question, answer = {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}
        before = self._render([question]) + "y"
        after = self._render([question, answer, {"role": "user", "content": message}])
        if not after.startswith(before):
            raise CliError(
                "this model's chat template does not render a conversation as the earlier turns followed by the new "
                "one (it rewrites earlier turns), so the chat cannot carry its cache from turn to turn"
            )
        added = after[len(before) :]
        if last_token in self.eos_ids:
            written = self.tokenizer.decode([last_token])
            if written and added.startswith(written):
                added = added[len(written) :]
        return self._tokens(added)


def turn_format(tokenizer, eos_ids: set[int], system: str | None = None) -> TemplateTurns | PlainTurns:
    if getattr(tokenizer, "chat_template", None):
        return TemplateTurns(tokenizer, eos_ids, system)
    return PlainTurns(tokenizer, system)


class StopRequest(StoppingCriteria):
    """Stops `generate` at the next step boundary once `request()` was called (by the chat's Ctrl-C handler): the
    step in flight finishes, so the returned cache has read exactly the tokens shown, and the chat can continue."""

    def __init__(self):
        self.requested = False

    def request(self) -> None:
        self.requested = True

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.requested, dtype=torch.bool, device=input_ids.device)


def _eos_ids(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set() if eos is None else {eos} if isinstance(eos, int) else set(eos)


class Conversation:
    """The history (token ids) and the cache of one conversation with `model`; `options` are the `generate`
    keyword arguments of every answer (new tokens, sampling, the window); `system`: a system prompt opening it."""

    def __init__(self, model, tokenizer, options: dict, family: str, system: str | None = None):
        self.model, self.tokenizer, self.options, self.family = model, tokenizer, options, family
        self.turns = turn_format(tokenizer, _eos_ids(model), system)
        self.stop = StopRequest()
        #: turns and tokens of the conversations before the last `reset` (the chat's closing line counts them all)
        self.earlier_turns = self.earlier_tokens = self.resets = 0
        self.history: torch.Tensor | None = None
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next message starts a new conversation (and a new cache)."""
        if self.history is not None:
            self.earlier_turns, self.earlier_tokens = self.earlier_turns + self.turn, self.earlier_tokens + self.length
            self.resets += 1
        self.history = None
        self.cache = None
        self.turn = 0

    def inputs_for(self, message: str) -> torch.Tensor:
        """[1, n]: the history followed by the new turn."""
        if self.history is None:
            new = self.turns.first(message)
        else:
            new = self.turns.after(message, int(self.history[0, -1]))
        new = torch.tensor([new], dtype=torch.long, device=self.model.device)
        return new if self.history is None else torch.cat([self.history, new], dim=1)

    def answer(self, message: str, streamer=None) -> int:
        """Answer `message` (streamed to `streamer`), continuing the cache; returns the number of new tokens. A
        refusal (ValueError before any token: a run beyond a model's learned positions) leaves the conversation as
        it was."""
        ids = self.inputs_for(message)
        if ids.shape[1] == self.length:
            raise ValueError("the message has no tokens")
        check = FAMILIES[self.family].check_generation  # a bounded run is checked by cachelimit's generate
        if "cache_limit" not in self.options and check is not None:
            check(self.model, ids.shape[1], self.options["max_new_tokens"])
        self.stop.requested = False
        arguments = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "return_dict_in_generate": True}
        arguments.update(streamer=streamer, stopping_criteria=StoppingCriteriaList([self.stop]), **self.options)
        if self.cache is not None:
            arguments = with_cache(arguments, self.cache)
        out = self.model.generate(**arguments)
        new_tokens = out.sequences.shape[1] - ids.shape[1]
        self.history, self.cache, self.turn = out.sequences, output_cache(out), self.turn + 1
        return new_tokens

    @property
    def all_turns(self) -> int:
        """Turns answered since the chat started, across every `reset`."""
        return self.earlier_turns + self.turn

    @property
    def all_tokens(self) -> int:
        """Tokens read and written since the chat started, across every `reset`."""
        return self.earlier_tokens + self.length

    @property
    def length(self) -> int:
        """Tokens in the conversation so far (every turn and every answer)."""
        return 0 if self.history is None else self.history.shape[1]

    def held_positions(self) -> int:
        """Positions per layer the cache holds for the next token (a bounded cache: at most the limit)."""
        if self.cache is None:
            return 0
        if isinstance(self.cache, BoundedCache):
            return int(self.cache.kept_lengths().max())
        return self.cache.get_seq_length()

    def kv_bytes(self) -> int:
        return 0 if self.cache is None else kv_bytes(self.cache)
