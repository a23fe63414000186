"""`cachelimit` on the command line: watch the KV cache stay flat while a model generates.

    cachelimit demo                                   # offline: unbounded vs bounded, table + plot
    cachelimit generate --cache-limit 256             # the built-in tiny model, streamed, live KV size
    cachelimit generate gpt2 --prompt "Hello" --max-new-tokens 500 --cache-limit 128 --sinks 4
    cachelimit generate smollm2 --chat "Tell me a story" --cache-limit 256 --sinks 4   # a real model, offline
    cachelimit bench --quick                          # the benchmark sweep (see cachelimit.benchmark)

Every failure is one line on stderr and a non-zero exit: 2 for bad input, 1 when a model cannot be loaded or
a run fails, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import tempfile
from pathlib import Path

from .._version import __version__
from ..core.policy import MAX_CACHE_LIMIT
from ..families.table import FAMILIES
from ..hf.request import BoundedRequest
from .errors import CliError
from .flag_types import MAX_SEED, int_in_range, token_count
from .model_argument import LoadError, resolve_source

DTYPES = ("float32", "bfloat16")
#: the generate arguments' names as this command line spells them (for the shared validator's messages)
FLAGS = {"cache_limit": "--cache-limit", "num_sink_tokens": "--sinks"}
DEMO_SINKS = 4


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block): the --help of the command says the rest."""

    def error(self, message: str):
        raise CliError(f"{message} (see `{self.prog} --help`)", code=2, prog=self.prog)


def family_names() -> list[str]:
    """The supported families, from the family table (which imports no torch: `--help` must not wait for it)."""
    return sorted(FAMILIES)


def add_window_arguments(parser: argparse.ArgumentParser, default_limit: int | None) -> None:
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


def _check_window(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--cache-limit`/`--sinks` through the same validator as `generate(cache_limit=, num_sink_tokens=)`."""
    if args.command == "demo" and args.sinks is None:  # the demo's default sinks fit any limit
        args.sinks = min(DEMO_SINKS, args.cache_limit - 1)
    if args.cache_limit is None and args.sinks is None:
        return
    try:
        BoundedRequest.from_arguments(args.cache_limit, args.sinks)
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
    if getattr(args, "model", None) is not None:
        resolve_source(args.model)  # a mistyped local path fails now, before any import or download
    _check_window(parser, args)
    if args.command == "demo":
        _check_out(parser, args.out)


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
    )
    generate.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="a transformers model name or local directory (model + tokenizer), `smollm2` (a real model, offline, "
        f"see README) or by default the built-in tiny model. Supported families: {', '.join(family_names())}",
    )
    text = generate.add_mutually_exclusive_group()
    text.add_argument("--prompt", default="Once upon a time", metavar="TEXT", help="(default: %(default)r)")
    text.add_argument("--chat", metavar="MESSAGE", help="a user message in the model's chat template (smollm2)")
    generate.add_argument("--max-new-tokens", type=token_count, default=200, metavar="N", help="(default: 200)")
    add_window_arguments(generate, default_limit=None)
    generate.add_argument(
        "--prefill-chunk-size",
        type=token_count,
        metavar="C",
        help="read the prompt C tokens at a time (with --cache-limit every prompt token obeys the window)",
    )
    generate.add_argument("--dtype", choices=DTYPES, default="float32", help="(default: float32)")
    generate.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    generate.add_argument(
        "--seed", type=int_in_range(0, MAX_SEED), default=0, metavar="K", help="random seed for --sample (default: 0)"
    )
    generate.set_defaults(parser=generate)
    mode = generate.add_mutually_exclusive_group()
    mode.add_argument("--sample", dest="sample", action="store_true", help="sample from the model")
    mode.add_argument("--greedy", dest="sample", action="store_false", help="pick the likeliest token (default)")

    demo = commands.add_parser(
        "demo",
        help="offline: unbounded vs bounded cache on smollm2 if installed, else the tiny model; table + PNG plot",
        description="Generate with a model twice, unbounded and with a cache limit; print the KV cache size side "
        "by side and plot it against the generated tokens.",
    )
    demo.add_argument("--model", choices=("auto", "tiny", "smollm2"), default="auto", help="auto: smollm2 if found")
    demo.add_argument("--tokens", type=token_count, metavar="N", help="tokens per run (default: 3000; smollm2: 1000)")
    add_window_arguments(demo, default_limit=256)
    demo.set_defaults(parser=demo)
    demo.add_argument("--out", type=Path, default=Path("cachelimit_out"), metavar="DIR", help="(default: %(default)s)")

    commands.add_parser(
        "bench",
        add_help=False,
        help="run the benchmark sweep; all arguments go to it (`cachelimit bench --help`)",
    )
    return parser


#: the command modules, imported only when their command runs (they need torch and transformers: --help does not)
COMMANDS = {
    "generate": "cachelimit.cli.generate_command",
    "demo": "cachelimit.cli.demo",
    "bench": "cachelimit.bench.sweep",
    "bench --quality": "cachelimit.bench.quality",
    "bench --budget": "cachelimit.bench.budget",
}


def run_bench(argv: list[str]) -> int:
    """`bench` is a thin front: its arguments, --help included, belong to `cachelimit.bench.sweep.main` (speed),
    with --quality to `cachelimit.bench.quality.main` (what a bounded cache does to a real model's text), with
    --budget to `cachelimit.bench.budget.main` (how many more rows fit in the same KV memory)."""
    scenario = next((flag for flag in ("--quality", "--budget") if flag in argv), None)
    name = COMMANDS[f"bench {scenario}" if scenario else "bench"]
    argv = [arg for arg in argv if arg != scenario]
    try:
        benchmark = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:  # a missing dependency of the module: report it
            raise
        if {"-h", "--help"} & set(argv):
            print(
                "usage: cachelimit bench [--quick] [--out DIR] ...\n\nRuns the benchmark sweep (--quick: a reduced one)."
            )
            print(f"This installation has no {name} module, so its options cannot be listed.")
            return 0
        raise CliError(f"this installation has no {name} module; `cachelimit bench` needs it") from None
    try:
        return int(benchmark.main(argv) or 0)
    except SystemExit as exit_:  # its own argparse (--help, bad options) exits; keep that status
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)


def _quiet_libraries() -> None:
    """The CLI's stderr is its status line and one-line errors; library warnings would break both."""
    import warnings

    import huggingface_hub
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    huggingface_hub.utils.logging.set_verbosity_error()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(args.parser, args)
    _quiet_libraries()
    # The commands need torch and transformers: imported only now, so --help and argument errors are instant.
    if args.command == "generate":
        return importlib.import_module(COMMANDS["generate"]).generate_command(args)
    return importlib.import_module(COMMANDS["demo"]).demo_command(args)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _stdout_closed() -> bool:
    """`cachelimit ... >&-` starts Python with no stdout at all (`sys.stdout is None`)."""
    return sys.stdout is None or getattr(sys.stdout, "closed", False)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `cachelimit` and `python -m cachelimit`; returns the exit status."""
    prog = "cachelimit"
    if _stdout_closed():
        print(f"{prog}: error: stdout is closed (>&-); redirect it to a file or /dev/null instead", file=sys.stderr)
        return 2
    try:
        return run(argv)
    except CliError as error:
        message, code, prog = _one_line(error), error.code, error.prog
    except LoadError as error:
        message, code = _one_line(error), 1
    except (ValueError, TypeError) as error:  # cachelimit's checks on the run's arguments, before any token
        message, code = _one_line(error), 2
    except SystemExit as exit_:  # --help and --version
        return exit_.code if isinstance(exit_.code, int) else 0
    except KeyboardInterrupt:
        print("\ncachelimit: interrupted", file=sys.stderr)
        if argv is None:  # the process's own command line: leave now, with 130
            # A Ctrl-C that lands inside C code (torch's import runs some) makes CPython kill itself with SIGINT
            # at exit even though it was handled here; exiting at once keeps the status 130.
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(130)
        return 130
    except BrokenPipeError:  # `cachelimit generate ... | head`: stop quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as error:
        if os.environ.get("CACHELIMIT_DEBUG"):
            raise
        message = f"{type(error).__name__}: {_one_line(error)} (set CACHELIMIT_DEBUG=1 for the traceback)"
        code = 1
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code
