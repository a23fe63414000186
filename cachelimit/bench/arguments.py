"""What every benchmark command does with its flags, written once: a bad flag or setting is one line on stderr and
exit status 2, before anything runs, like every other cachelimit command (never a traceback, never a run that fails
an hour in); integer flags read text as the command line's do (`cli.flag_types`: plain ASCII digits, a range)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from ..cli.flag_types import int_in_range
from ..core.eviction import POLICIES
from ..core.policy import MAX_CACHE_LIMIT

T = TypeVar("T")

#: the most torch threads a benchmark accepts (far more than any machine it runs on has cores)
MAX_THREADS = 1024


class OneLineErrors(argparse.ArgumentParser):
    """Bad flags are one line on stderr (exit 2), naming the command and its --help."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def settings_or_exit(parser: argparse.ArgumentParser, resolve: Callable[[argparse.Namespace], T], args) -> T:
    """`resolve(args)`: the command's settings, checked together (a ValueError names the flags and the allowed
    range); on a ValueError, the parser's one-line error and exit 2."""
    try:
        return resolve(args)
    except ValueError as error:
        parser.error(str(error))
        raise  # unreachable: `error` exits


def count(minimum: int = 1):
    """An integer flag of at least `minimum` (tokens, rows, a limit), read as the command line reads its flags."""
    return int_in_range(minimum, MAX_CACHE_LIMIT)


def threads(text: str) -> int:
    """`--threads`: torch threads, 1 to MAX_THREADS."""
    return int_in_range(1, MAX_THREADS)(text)


def int_list(text: str) -> list[int]:
    """A comma-separated list of integer flags >= 1 (`--limits 64,256`), each read as `count()` reads one."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return [count()(part) for part in parts]


def name_list(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    """A comma-separated list of names from `allowed` (`--variants a,b`); an unknown or empty one is refused."""

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {unknown or text!r}; choose from {', '.join(allowed)}")
        return names

    return parse


def count_or_all(value: str) -> int | None:
    """A token count of at least 2, or `all` (None: the whole text)."""
    if value == "all":
        return None
    try:
        return count(2)(value)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(str(error).replace("must be ", "must be `all` or ", 1)) from None


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """`--policy P --protected R`, spelled and read as `cachelimit generate` and `chat` read them (`cli.parser`)."""
    parser.add_argument(
        "--policy", choices=list(POLICIES), default=None, metavar="P",
        help="what the bounded runs keep: window (default), keydiff, tova, snapkv",
    )  # fmt: skip
    parser.add_argument(
        "--protected", type=int_in_range(0, MAX_CACHE_LIMIT - 1), default=None, metavar="R",
        help="scored P: keep the R newest (default: the policy's own)",
    )  # fmt: skip


def cache_policy_of(policy: str | None, protected: int | None = None):
    """The `cache_policy` of `--policy P --protected R`: None (the window) or the scored policy."""
    return None if policy in (None, "window") else POLICIES[policy](protected=protected)


def check_policy(args: argparse.Namespace, bounds) -> None:
    """`--policy`/`--protected` against every (limit, sinks) the command runs bounded, through the validator
    `generate` uses, so a bad combination is refused before any model is loaded (a ValueError naming the flags)."""
    from ..hf.request import BoundedRequest

    if args.protected is not None and args.policy in (None, "window"):
        raise ValueError(
            "argument --protected: needs a scored --policy (keydiff, tova, snapkv); the window keeps by age"
        )
    policy = cache_policy_of(args.policy, args.protected)
    for limit, sinks in bounds:
        try:
            BoundedRequest.from_arguments(limit, sinks, cache_policy=policy)
        except (ValueError, TypeError) as error:
            flag = "--protected" if getattr(error, "argument", "") == "protected" else "--limits"
            raise ValueError(
                f"argument {flag}: cache limit {limit} with {sinks or 0} sinks"
                f"{'' if policy is None else f' and --policy {args.policy}'}: {error}"
            ) from None
