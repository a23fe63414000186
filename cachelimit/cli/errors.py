"""The error every command-line module raises for a failure the user can act on (no torch here: the parser and
the commands import it, so it sits below both and neither imports the other)."""

from __future__ import annotations


class CliError(Exception):
    """A failure the user can act on; `code` is the exit status, `prog` the command that prints it."""

    def __init__(self, message: str, code: int = 1, prog: str = "cachelimit"):
        super().__init__(message)
        self.code, self.prog = code, prog
