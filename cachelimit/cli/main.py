"""`cachelimit` on the command line: watch the KV cache stay flat while a model generates.

    cachelimit demo                                   # offline: unbounded vs bounded, table + plot
    cachelimit generate --cache-limit 256             # the built-in tiny model, streamed, live KV size
    cachelimit generate gpt2 --prompt "Hello" --max-new-tokens 500 --cache-limit 128 --sinks 4
    cachelimit generate smollm2 --chat "Tell me a story" --cache-limit 256 --sinks 4   # a real model, offline
    cachelimit chat smollm2 --cache-limit 512 --sinks 4    # an endless chat: the cache is carried from turn to turn
    cachelimit families                               # the model families cachelimit serves
    cachelimit bench --quick                          # the benchmark sweep (see cachelimit.bench.sweep)

Every failure is one line on stderr and a non-zero exit: 2 for bad input, 1 when a model cannot be loaded or
a run fails, 130 when interrupted.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from .errors import CliError
from .model_argument import LoadError
from .parser import build_parser, check_arguments, family_names

__all__ = ["build_parser", "check_arguments", "family_names", "main", "run"]

#: the command modules, imported only when their command runs (they need torch and transformers: --help does not)
COMMANDS = {
    "generate": "cachelimit.cli.generate_command",
    "chat": "cachelimit.cli.chat",
    "demo": "cachelimit.cli.demo",
    "bench": "cachelimit.bench.sweep",
    "bench --quality": "cachelimit.bench.quality",
    "bench --budget": "cachelimit.bench.budget",
    "bench --long": "cachelimit.bench.long",
    "bench --recall": "cachelimit.bench.recall",
}


#: the bench scenarios that take `--policy P`/`--protected R` (`bench --recall` takes its policies as --variants)
POLICY_FLAGS = {"--quality": ("--policy", "--protected"), "--recall": ("--protected",)}


def _policy_flags_refusal(scenario: str | None, argv: list[str]) -> str | None:
    """`--policy`/`--protected` given to a scenario that has no such flag: the one line saying which ones have it
    (printed as the scenarios print their own flag errors, exit status 2)."""
    taken = POLICY_FLAGS.get(scenario, ())
    given = [flag for flag in ("--policy", "--protected") if flag not in taken and any(
        arg == flag or arg.startswith(flag + "=") for arg in argv)]  # fmt: skip
    if not given:
        return None
    command = f"cachelimit bench{f' {scenario}' if scenario else ''}"
    return (
        f"{command}: error: argument {given[0]}: `{command}` has no such flag: `bench --quality --policy P "
        "--protected R` runs its bounded runs under a scored policy, `bench --recall` compares policies with "
        "--variants (and --protected R); the speed sweep, --budget and --long measure the window only"
    )


def run_bench(argv: list[str]) -> int:
    """`bench` is a thin front: its arguments, --help included, belong to `cachelimit.bench.sweep.main` (speed),
    with --quality to `cachelimit.bench.quality.main` (what a bounded cache does to a real model's text), with
    --budget to `cachelimit.bench.budget.main` (how many more rows fit in the same KV memory), with --long to
    `cachelimit.bench.long.main` (a bounded step at 16k-32k tokens on a real model, and the prefill's memory), with
    --recall to `cachelimit.bench.recall.main` (does a bounded cache still find the fact)."""
    scenario = next((flag for flag in ("--quality", "--budget", "--long", "--recall") if flag in argv), None)
    name = COMMANDS[f"bench {scenario}" if scenario else "bench"]
    if refusal := _policy_flags_refusal(scenario, argv):
        print(refusal, file=sys.stderr)
        return 2
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

    from ..hf.run_checks import PastContextWarning

    warnings.filterwarnings("ignore")
    warnings.filterwarnings("always", category=PastContextWarning)  # cachelimit's own, about the run asked for
    if not getattr(warnings.showwarning, "one_line", False):  # once, however often `run` is called in a process
        shown = warnings.showwarning

        def show(message, category, *args, **kwargs):
            if issubclass(category, PastContextWarning):
                print(f"cachelimit: warning: {_one_line(message)}", file=sys.stderr)
            else:
                shown(message, category, *args, **kwargs)

        show.one_line = True
        warnings.showwarning = show
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
    if args.command == "families":  # the family table imports no torch: answered at once
        print("\n".join(family_names()))
        return 0
    check_arguments(args.parser, args)
    _quiet_libraries()
    # The commands need torch and transformers: imported only now, so --help and argument errors are instant.
    command = importlib.import_module(COMMANDS[args.command])
    return getattr(command, f"{args.command}_command")(args)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _stdout_closed() -> bool:
    """`cachelimit ... >&-` starts Python with no stdout at all (`sys.stdout is None`)."""
    return sys.stdout is None or getattr(sys.stdout, "closed", False)


def _caused_by_interrupt(error: BaseException) -> bool:
    """Whether a Ctrl-C is behind this error: one that lands in an import can reach `main` wrapped (Python 3.11
    raises a RuntimeError "Error calling __set_name__" from it when it interrupts a class body being built)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _interrupted(argv: list[str] | None) -> int:
    print("\ncachelimit: interrupted", file=sys.stderr)
    if argv is None:  # the process's own command line: leave now, with 130
        # A Ctrl-C that lands inside C code (torch's import runs some) makes CPython kill itself with SIGINT at exit
        # even though it was handled here; exiting at once keeps the status 130.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(130)
    return 130


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
        return _interrupted(argv)
    except BrokenPipeError:  # `cachelimit generate ... | head`: stop quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as error:
        if _caused_by_interrupt(error):
            return _interrupted(argv)
        if os.environ.get("CACHELIMIT_DEBUG"):
            raise
        message = f"{type(error).__name__}: {_one_line(error)} (set CACHELIMIT_DEBUG=1 for the traceback)"
        code = 1
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code
