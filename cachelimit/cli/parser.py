"""The command line's parser: every command's flags, and the checks argparse cannot express on one flag alone.

No torch here (`--help` and argument errors must answer at once). The flags a model run takes (the model, the number
of new tokens, the window, dtype, device, seed, sampling) are declared once (`add_run_arguments`) and shared by
`generate` and `chat`, so that the two read and check them alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

from .._version import __version__
from ..core.eviction import POLICIES
from ..core.policy import MAX_CACHE_LIMIT
from ..families.table import FAMILIES
from ..hf.request import BoundedRequest
from .errors import CliError
from .flag_types import MAX_SEED, int_in_range, token_count
from .known_models import PRETRAINED, chat_help, chat_refusal
from .model_argument import resolve_source
from .system_flags import add_system_arguments, check_system

#: float16 too: torch 2.13 computes SmolLM2 in float16 on CPU as well (logits within 0.14 of float32's, the same
#: greedy text), only no faster than float32 there (CPU time 1.08x; bfloat16 0.79x); see docs/cli.md, "--dtype"
DTYPES = ("float32", "bfloat16", "float16")
DTYPE_HELP = "(default: float32; on CPU bfloat16 is the faster half)"
GENERATE_EXAMPLES = """examples:
  cachelimit generate --cache-limit 256                       # the built-in tiny model, no download
  cachelimit generate smollm2 --chat "Tell me a story" --cache-limit 256 --sinks 4
  cachelimit generate gpt2 --prompt "Hello" --max-new-tokens 500 --cache-limit 128

MODEL's family must be one cachelimit serves: `cachelimit families` lists them."""
CHAT_EXAMPLES = """examples:
  cachelimit chat smollm2                                     # a real model, offline, limit 1024, 4 sinks
  cachelimit chat smollm2 --cache-limit 512 --sinks 4 --sample
  echo "Hello" | cachelimit chat smollm2 --max-new-tokens 50  # messages from a pipe, one per line
  cachelimit chat smollm2 --system "You are a pirate." --pin-system --policy keydiff"""
#: the generate arguments' names as this command line spells them (for the shared validator's messages)
FLAGS = {
    "cache_limit": "--cache-limit",
    "num_sink_tokens": "--sinks",
    "cache_policy": "--policy",
    "protected": "--protected",
}
DEMO_SINKS = 4
CHAT_LIMIT = 1024


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block): the --help of the command says the rest. An error
    found after a subcommand names it (`cachelimit chat: error: ...`, `cachelimit chat --help`), unknown arguments
    included: argparse leaves those to the top-level parser, so `parse_args` hands them to the subcommand's."""

    def error(self, message: str):
        raise CliError(f"{message} (see `{self.prog} --help`)", code=2, prog=self.prog)

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            owner = getattr(parsed, "parser", None) or self
            owner.error(f"unrecognized arguments: {' '.join(unknown)}{_elsewhere(self, owner, unknown)}")
        return parsed


class _ExamplesFormatter(argparse.HelpFormatter):
    """Wraps the description as argparse does, but prints an epilog of example lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


def _elsewhere(top: argparse.ArgumentParser, owner: argparse.ArgumentParser, unknown: list[str]) -> str:
    """`; --prompt is a flag of `cachelimit generate``: where a flag the command lacks belongs, if another has it."""
    flag = next((arg.split("=")[0] for arg in unknown if arg.startswith("--")), None)
    commands = next((a for a in top._actions if isinstance(a, argparse._SubParsersAction)), None)
    if flag is None or commands is None:
        return ""
    owners = [p.prog for p in commands.choices.values() if p is not owner and flag in p._option_string_actions]
    return f"; {flag} is a flag of `{'`, `'.join(owners)}`" if owners else ""


def family_names() -> list[str]:
    """The supported families, from the family table (which imports no torch: `--help` must not wait for it)."""
    return sorted(FAMILIES)


def add_window_arguments(parser: argparse.ArgumentParser, default_limit: int | None) -> None:
    """`--cache-limit` and `--sinks`. A command with a default limit also pins `DEMO_SINKS` sinks by default (fewer
    when the limit leaves no room for them): `_check_window`."""
    unbounded = "unbounded, for comparison" if default_limit is None else str(default_limit)
    parser.add_argument(
        "--cache-limit",
        type=token_count,
        default=default_limit,
        metavar="L",
        help=f"keep at most L cached positions per layer (default: {unbounded})",
    )
    sinks = "" if default_limit is None else f" (default: {DEMO_SINKS}, or L - 1 when L <= {DEMO_SINKS})"
    parser.add_argument(
        "--sinks",
        type=int_in_range(0, MAX_CACHE_LIMIT - 1),
        default=None,
        metavar="S",
        help=f"of those, pin the first S tokens (attention sinks, StreamingLLM); needs S < L{sinks}",
    )
    parser.add_argument(
        "--policy", choices=list(POLICIES), metavar="P", help="what is kept: window (default), keydiff, tova, snapkv"
    )
    parser.add_argument(
        "--protected", type=int_in_range(0, MAX_CACHE_LIMIT - 1), metavar="R", help="scored P: keep the R newest"
    )
    parser.set_defaults(default_sinks=None if default_limit is None else DEMO_SINKS)


def cache_policy(args: argparse.Namespace):
    """The `cache_policy` the flags ask for: None (the window), or the scored policy with its protected window."""
    if args.policy in (None, "window"):
        return None
    return POLICIES[args.policy](protected=args.protected)


def add_run_arguments(parser: argparse.ArgumentParser, default_limit: int | None, new_tokens: str) -> None:
    """The flags of a run on one model, shared by `generate` and `chat`: MODEL, `--max-new-tokens` (`new_tokens`
    says what it counts), the window, `--prefill-chunk-size`, `--dtype`, `--device`, `--seed`, `--sample`/`--greedy`."""
    parser.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help=f"a transformers model name or directory, {'/'.join(PRETRAINED)} (real, offline), or (default) the built-in "
        "tiny model",
    )
    parser.add_argument(
        "--max-new-tokens", type=token_count, default=200, metavar="N", help=f"{new_tokens} (default: 200)"
    )
    add_window_arguments(parser, default_limit=default_limit)
    parser.add_argument(
        "--prefill-chunk-size",
        type=token_count,
        metavar="C",
        help="read the prompt C tokens at a time (with --cache-limit every prompt token obeys the window)",
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help=DTYPE_HELP)
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument(
        "--seed", type=int_in_range(0, MAX_SEED), default=0, metavar="K", help="random seed for --sample (default: 0)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sample", dest="sample", action="store_true", help="sample from the model")
    mode.add_argument("--greedy", dest="sample", action="store_false", help="pick the likeliest token (default)")
    parser.set_defaults(parser=parser)


def _check_window(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--cache-limit`/`--sinks` through the same validator as `generate(cache_limit=, num_sink_tokens=)`."""
    if args.sinks is None and args.default_sinks is not None and args.cache_limit is not None:
        args.sinks = min(args.default_sinks, args.cache_limit - 1)  # the default sinks fit any limit
    if args.protected is not None and args.policy in (None, "window"):
        parser.error("argument --protected: needs a scored --policy (keydiff, tova, snapkv); the window keeps by age")
    if args.policy not in (None, "window") and args.cache_limit is None:
        parser.error("argument --policy: needs --cache-limit: a policy chooses what a bounded cache keeps")
    if args.cache_limit is None and args.sinks is None:
        return
    try:
        BoundedRequest.from_arguments(args.cache_limit, args.sinks, cache_policy=cache_policy(args))
    except (ValueError, TypeError) as error:
        requirement = getattr(error, "requirement", str(error))
        for name, flag in FLAGS.items():
            requirement = requirement.replace(f"`{name}`", flag)
        parser.error(f"argument {FLAGS.get(getattr(error, 'argument', ''), '--cache-limit')}: {requirement}")


def _check_out(parser: argparse.ArgumentParser, directory: Path) -> None:
    """The demo writes its plot and JSON at the end: a place it cannot write to fails now, not after the runs."""
    if directory.exists() and not directory.is_dir():
        parser.error(f"argument --out: {str(directory)!r} is a file; give a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        parser.error(f"argument --out: cannot write to {str(directory)!r}: {error.strerror or error}")


#: per command: the optional modules it needs (module, what for), checked before any model is loaded or run
OPTIONAL_MODULES = {"demo": (("matplotlib", "the demo's plot"),)}


def _check_optional(command: str) -> None:
    """A missing optional dependency fails at once, in one line saying what to install, not after the runs."""
    for module, purpose in OPTIONAL_MODULES.get(command, ()):
        if importlib.util.find_spec(module) is None:
            raise CliError(
                f"{purpose} needs {module}, which is not installed: pip install 'cachelimit[cli]' (or {module})",
                prog=f"cachelimit {command}",
            )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks argparse cannot express on one argument alone."""
    prompt = getattr(args, "prompt", None)
    if prompt == "":
        parser.error("argument --prompt: must not be empty")
    if prompt is not None:
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError:  # bytes the locale could not decode arrive as lone surrogates
            parser.error("argument --prompt: is not valid UTF-8 text (check the terminal's or the script's encoding)")
    if getattr(args, "model", None) is not None and args.command != "demo":
        resolve_source(args.model)  # a mistyped local path fails now, before any import or download
        if getattr(args, "chat", None) is not None and chat_refusal(args.model):  # now, not after the load
            parser.error(chat_refusal(args.model))
    check_system(parser, args)
    _check_window(parser, args)
    if args.command == "demo":
        _check_out(parser, args.out)
    _check_optional(args.command)


def build_parser() -> _Parser:
    parser = _Parser(
        prog="cachelimit",
        description="Bound the KV cache of Hugging Face transformers generation, and watch it stay flat.",
    )
    parser.add_argument("--version", action="version", version=f"cachelimit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    generate = commands.add_parser(
        "generate",
        help="stream text from a model with a live KV-cache readout",
        description="Generate text from MODEL, streamed to stdout, with tokens, tokens/s and the KV cache size "
        "shown live on stderr. Without --cache-limit the cache is unbounded, for comparison.",
        epilog=GENERATE_EXAMPLES,
        formatter_class=_ExamplesFormatter,
    )
    add_run_arguments(generate, default_limit=None, new_tokens="tokens to generate")
    text = generate.add_mutually_exclusive_group()
    text.add_argument("--prompt", default="Once upon a time", metavar="TEXT", help="(default: %(default)r)")
    text.add_argument("--chat", metavar="MESSAGE", help=chat_help())

    chat = commands.add_parser(
        "chat",
        epilog=CHAT_EXAMPLES,
        formatter_class=_ExamplesFormatter,
        help="an endless multi-turn chat whose bounded cache is carried from turn to turn",
        description="Chat with MODEL turn after turn; every answer continues the cache the last one returned, so "
        "the sinks keep the start of the conversation and memory stays flat however long it goes. A live status "
        "line shows the turn, the tokens and the KV cache size. Type /stats or /reset; Ctrl-C stops an answer "
        "(the chat goes on), Ctrl-D ends the chat. Models without a chat template (the built-in tiny model) get "
        "plain 'User:'/'Assistant:' turns.",
    )
    add_run_arguments(chat, default_limit=CHAT_LIMIT, new_tokens="at most N tokens per answer")
    add_system_arguments(chat)

    demo = commands.add_parser(
        "demo",
        help="offline: unbounded vs bounded cache on SmolLM2 (else the tiny model, saying why); table + PNG plot",
        description="Generate with a model twice, unbounded and with a cache limit; print the KV cache size side "
        "by side and plot it against the generated tokens. SmolLM2 is used when it can be loaded (else the tiny "
        "model, with the reason on one line).",
    )
    demo.add_argument(
        "--model",
        choices=("auto", "tiny", "smollm2"),
        default="auto",
        help="auto (default): smollm2, or the tiny model (with the reason) when it cannot be loaded",
    )
    demo.add_argument(
        "--tokens", type=token_count, metavar="N", help="tokens per run (default: smollm2 800, tiny 3000)"
    )
    add_window_arguments(demo, default_limit=256)
    demo.set_defaults(parser=demo)
    demo.add_argument("--out", type=Path, default=Path("cachelimit_out"), metavar="DIR", help="(default: %(default)s)")

    families = commands.add_parser(
        "families",
        help="list the model families cachelimit serves (a family is a config.model_type)",
        description="List the model families cachelimit serves, one per line: the `model_type` of a model's config.",
    )
    families.set_defaults(parser=families)

    commands.add_parser(
        "bench",
        add_help=False,
        help="run the benchmark sweep; all arguments go to it (`cachelimit bench --help`)",
    )
    return parser
