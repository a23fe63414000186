"""`cachelimit chat`: an endless multi-turn chat whose cache is carried from turn to turn (`cli.conversation`).

The terminal side: messages are read line by line from stdin (with line editing on a terminal), answers stream to
stdout, and the status line (turn, new tokens, tokens in the conversation, tokens/s, KV bytes) lives on stderr, live
while an answer is written and once more, for good, when it ends. `/stats` and `/reset` act on the conversation.

Ctrl-C while an answer is written stops it at the next step boundary (a stopping criterion the SIGINT handler sets,
`StopRequest`): the step in flight finishes, so the cache has read exactly the text shown, and the chat goes on. A
second Ctrl-C within the same answer interrupts at once and ends the chat (exit status 130): the cache may then be in
the middle of a forward, and a chat never continues from a cache it cannot trust. Ctrl-C at the prompt clears the
line; Ctrl-D (end of input) ends the chat. Neither prints a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

import torch

from ..families.patching import patch
from ..hf.compat import CHUNKED_PREFILL_AFTER_A_CACHE, RECURRENT_STATE_CARRIED, require
from ..hf.recurrent_state import has_recurrent_layers, restart_reason
from ..hf.request import BoundedRequest
from .conversation import Conversation, PlainTurns, StopRequest
from .errors import CliError
from .generate_command import load_for_run, one_line, run_options, window_label
from .parser import cache_policy
from .terminal import KVMeter, LiveTextStreamer, StatusLine, format_bytes, no_control_echo

PROMPT = "> "
HELP = "commands: /stats, /reset, /help; Ctrl-C stops an answer, Ctrl-D ends the chat"


class ChatStreamer(LiveTextStreamer):
    """The answer's text, and a status line that names the turn and counts the whole conversation."""

    def __init__(self, tokenizer, status: StatusLine, meter: KVMeter, label: str, turn: int, stop: StopRequest):
        super().__init__(tokenizer, status, meter, label)
        self.turn, self.stop, self.read = turn, stop, 0

    def put(self, value) -> None:
        if self.next_tokens_are_prompt:
            self.read = value.shape[-1]  # the conversation so far, with this turn
        super().put(value)

    def line(self) -> str:
        """Turn, tokens, then the KV bytes early in the line (a narrow terminal cuts the pinned line's end)."""
        kv = self.meter.bytes
        stopped = " | stopped (Ctrl-C)" if self.stop.requested else ""
        return (
            f"[cachelimit] turn {self.turn:,} | {self.read + self.generated:,} tokens (+{self.generated:,}) | "
            f"KV cache {format_bytes(kv)} ({kv:,} B) | {self.rate():.1f} tok/s | {self.label}{stopped}"
        )


@contextlib.contextmanager
def ctrl_c_stops(stop: StopRequest) -> Iterator[None]:
    """While an answer is written: the first SIGINT asks `generate` to stop at the next step, a second one
    interrupts (KeyboardInterrupt). Signals reach the main thread only; elsewhere nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_interrupt(signum, frame) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.request()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _line_editing() -> None:
    """Arrow keys and history at the prompt where Python has readline (a terminal only: it would echo piped input)."""
    if sys.stdin.isatty():
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (importing it is what enables it for input())


def read_message() -> str | None:
    """The next message (None at the end of input); Ctrl-C at the prompt starts a fresh line."""
    while True:
        try:
            message = input(PROMPT)
        except KeyboardInterrupt:
            print(f"\n[cachelimit] {HELP}", file=sys.stderr)
            continue
        except EOFError:
            print()
            return None
        except UnicodeDecodeError:
            print(
                "[cachelimit] that line is not valid text in the terminal's encoding; type it again", file=sys.stderr
            )
            continue
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode arrive as lone surrogates
            print("[cachelimit] that line is not valid UTF-8 text; type it again", file=sys.stderr)
            continue
        if not sys.stdin.isatty():  # piped messages are not echoed by a terminal: show them in the transcript
            print(message)
        return message


def _note(text: str) -> None:
    print(f"[cachelimit] {text}", file=sys.stderr, flush=True)


def plural(count: int, noun: str) -> str:
    """`1 turn`, `2 turns`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def closing_line(conversation: Conversation) -> str:
    """Every turn and token of the chat, those before a `/reset` included."""
    conversations = conversation.resets + (conversation.history is not None)
    across = f" in {conversations:,} conversations (/reset)" if conversations > 1 else ""
    return f"chat ended after {plural(conversation.all_turns, 'turn')}{across}, {plural(conversation.all_tokens, 'token')}"


def stats_line(conversation: Conversation, meter: KVMeter, label: str) -> str:
    held, kv = conversation.held_positions(), conversation.kv_bytes()
    return (
        f"{plural(conversation.turn, 'turn')} | {conversation.length:,} tokens in the conversation | the cache holds {held:,} "
        f"positions per layer | KV cache {format_bytes(kv)} ({kv:,} B), at most {format_bytes(meter.peak)} "
        f"({meter.peak:,} B) so far | {label}"
    )


def command(text: str, conversation: Conversation, meter: KVMeter, label: str) -> None:
    name = text.split()[0]
    if name == "/stats":
        _note(stats_line(conversation, meter, label))
    elif name == "/reset":
        conversation.reset()
        meter.bytes = 0
        _note("conversation reset: history and cache dropped; the next message starts a new one")
    elif name == "/help":
        _note(HELP)
    else:
        _note(f"unknown command {name!r}; {HELP}")


def answer(conversation: Conversation, message: str, meter: KVMeter, label: str) -> None:
    """One turn: the answer streamed, then its status line. A refusal before any token is one line, and the chat
    goes on with the conversation as it was."""
    with StatusLine() as status:
        streamer = ChatStreamer(conversation.tokenizer, status, meter, label, conversation.turn + 1, conversation.stop)
        try:
            with ctrl_c_stops(conversation.stop), no_control_echo(), torch.inference_mode():
                conversation.answer(message, streamer)
        except (ValueError, TypeError) as error:
            if streamer.generated:  # not a refusal: something failed mid-answer
                raise
            print(f"cachelimit chat: error: {one_line(error)} (/reset starts a new conversation)", file=sys.stderr)
            return
        except KeyboardInterrupt:  # the second Ctrl-C: show what was written, then leave
            if streamer.generated:
                streamer.end()
                status.finish(streamer.line())
            raise
        status.write_text("\n")  # the answer ends its own line, so the transcript reads unambiguously
        status.finish(streamer.line())


def check_turns_continue(model) -> None:
    """Every turn after the first reads its new text after the cache in one forward (bounded or not): refuse, before
    the first message, a model whose recurrent layers would compute that text wrongly (`hf.recurrent_state`)."""
    if not has_recurrent_layers(model.config):
        return
    turns = "a chat on a model with recurrent layers (every turn after the first continues the cache with its text)"
    require(turns, RECURRENT_STATE_CARRIED)
    reason = restart_reason(model)
    if reason is not None:
        raise CliError(
            f"this model cannot chat: every turn after the first reads its new text after the cache in one forward, "
            f"and {reason}; use `cachelimit generate` for one prompt at a time",
            code=2,
        )


def pin_system(args: argparse.Namespace, conversation: Conversation, options: dict) -> None:
    """`--pin-system`: the sinks become the system prompt's tokens (`cli.system_flags`), for the window and for a
    scored policy alike; a limit that leaves no room beyond them (and the policy's protected window) is refused
    here, before any turn, with the count."""
    pinned, policy = len(conversation.turns.system_tokens()), cache_policy(args)
    try:
        BoundedRequest.from_arguments(args.cache_limit, pinned, cache_policy=policy)
    except (ValueError, TypeError):
        protected = None if policy is None else policy.protected
        needed = "above that" + ("" if protected is None else f", with room for --protected {protected:,} beyond them")
        raise CliError(
            f"argument --pin-system: the system prompt takes {pinned:,} tokens with the chat template's prefix; "
            f"--cache-limit {args.cache_limit:,} must be {needed} (the cache keeps them and a recent window); "
            "give a larger --cache-limit or a shorter --system",
            code=2,
            prog="cachelimit chat",
        ) from None
    args.sinks = options["num_sink_tokens"] = pinned


def start_conversation(args: argparse.Namespace, model, tokenizer, family: str) -> tuple[Conversation, str]:
    """The conversation the flags ask for (its system prompt pinned with `--pin-system`) and the status line's
    name for its cache; the family patched. Nothing is generated yet."""
    options = run_options(args, model, tokenizer)
    conversation = Conversation(model, tokenizer, options, family, system=getattr(args, "system", None))
    pinned = getattr(args, "pin_system", False)
    if pinned:
        pin_system(args, conversation, options)
    patch(family)
    return conversation, window_label(args) + (" (the system prompt)" if pinned else "")


def chat_command(args: argparse.Namespace) -> int:
    """Chat with MODEL until the end of input; see the module docstring."""
    if args.prefill_chunk_size is not None and args.cache_limit is not None:
        require(
            "`--prefill-chunk-size` in a chat (every turn after the first continues a cache)",
            CHUNKED_PREFILL_AFTER_A_CACHE,
        )
    model, tokenizer, family, header = load_for_run(args)
    check_turns_continue(model)
    conversation, label = start_conversation(args, model, tokenizer, family)
    torch.manual_seed(args.seed)
    turns = (
        "plain 'User:'/'Assistant:' turns (no chat template)"
        if isinstance(conversation.turns, PlainTurns)
        else "its chat template"
    )
    print(f"{header}; {label}; {turns}", file=sys.stderr)
    _note(f"at most {args.max_new_tokens:,} tokens per answer; {HELP}")
    _line_editing()
    with KVMeter(model) as meter:
        while (message := read_message()) is not None:
            if message.startswith("/"):
                command(message, conversation, meter, label)
            elif message.strip():
                answer(conversation, message, meter, label)
    _note(closing_line(conversation))
    return 0
