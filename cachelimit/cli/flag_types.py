"""The command line's integer flags: what text they read, and their ranges (no torch here: `--help` and argument
errors must answer at once).

Why not `int()`: it also reads " 5", "5 ", "1_000", "+5" and the digits of other scripts ("٥", "５"), which a
shell script or a copy-paste can carry in unseen; a flag reads plain ASCII decimal digits only, so that what the
user sees is what runs.
"""

from __future__ import annotations

import argparse
import re

from ..core.policy import MAX_CACHE_LIMIT

MAX_SEED = 2**64 - 1  # torch.manual_seed takes a 64-bit seed

#: an integer flag's text: ASCII digits, with a leading "-" read only so that a negative value gets the range error
_PLAIN_INT = re.compile(r"-?[0-9]+")
_MAX_DIGITS = 30  # more significant digits than any maximum here has (2^64 has 20): out of range, never converted


def int_in_range(minimum: int, maximum: int):
    """An argparse type: an int in [minimum, maximum] in plain ASCII digits (see the module docstring); the error
    gives the range and shows the text with `ascii()`, so that a space or another script's digit is visible."""
    allowed = f"an int in [{minimum}, {maximum}]"

    def parse(text: str) -> int:
        if not _PLAIN_INT.fullmatch(text):
            shown = ascii(text) if len(text) <= 40 else f"{ascii(text[:40])}... ({len(text)} characters)"
            raise argparse.ArgumentTypeError(f"must be {allowed} written in ASCII digits 0-9, got {shown}")
        digits = len(text.lstrip("-").lstrip("0"))
        if digits > _MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"must be {allowed}, got a {digits}-digit number")
        value = int(text)
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {value}")
        return value

    return parse


#: counts of tokens: a count and a prompt length are summed in torch's int64, so stop where `cache_limit` does
token_count = int_in_range(1, MAX_CACHE_LIMIT)
