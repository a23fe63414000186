"""`cachelimit chat --system TEXT [--pin-system]`: the flags, and what can be checked before the model loads.

Why pin the whole system prompt: the window (and each scored policy) keeps the first `--sinks` tokens for good and
the rest by age or score, so a long chat pushes the system prompt out of the cache, and with it the instructions the
answers should follow. `--pin-system` makes the sinks exactly the system prompt's tokens (with the chat template's
prefix: `Conversation.turns.system_tokens()`), so the cache keeps all of it at every turn. Its token count needs the
tokenizer: `cli.chat.pin_system` checks it against the limit once the model is loaded, before any turn. No torch here.
"""

from __future__ import annotations

import argparse


def add_system_arguments(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("--system", metavar="TEXT", help="a system prompt that opens the conversation")
    chat.add_argument(
        "--pin-system",
        action="store_true",
        help="keep the whole system prompt in the cache for good: its tokens (with the chat template's prefix) are "
        "the sinks, instead of --sinks; the limit must leave room beyond them",
    )


def check_system(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`chat --system/--pin-system`: the text, and the sinks that pinning replaces (its token count needs the
    tokenizer: `cli.chat.pin_system` checks it against the limit once the model is loaded, before any turn)."""
    system = getattr(args, "system", None)
    if system is not None:
        if not system.strip():
            parser.error("argument --system: must not be empty")
        try:
            system.encode("utf-8")
        except UnicodeEncodeError:
            parser.error("argument --system: is not valid UTF-8 text (check the terminal's or the script's encoding)")
    if not getattr(args, "pin_system", False):
        return
    if system is None:
        parser.error("argument --pin-system: needs --system TEXT, the system prompt to pin")
    if args.sinks is not None:
        parser.error("argument --pin-system: the sinks are the system prompt's tokens; give --pin-system or --sinks")
    args.default_sinks = None  # the system prompt's tokens replace the default sinks
