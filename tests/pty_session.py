"""Drive `python -m cachelimit ...` through a pseudo-terminal, as a user at a terminal does.

The child gets the terminal as stdin, stdout and stderr, and as its *controlling* terminal (its own session), so a
Ctrl-C typed into the terminal (the byte 0x03) reaches it as SIGINT from the terminal's line discipline, and a Ctrl-D
(0x04) at the start of a line is the end of input, exactly as at a keyboard. What comes back is the screen as bytes;
`screen()` removes the status line's own drawing (cursor saves, the pinned bottom row, the scroll region) and the
terminal's carriage returns and the echo of a typed Ctrl-C, leaving the transcript a user reads in the scrollback.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

from .cli_helpers import REPO

#: one live draw of the pinned status line: save the cursor, go to the bottom row, clear it, text, restore
LIVE_DRAW = re.compile(r"\x1b7\x1b\[\d+;1H\x1b\[2K([^\x1b]*)\x1b8")
#: the status line takes the bottom row (a newline for room, the scroll region, back up) and gives it back
REGION_SET = re.compile(r"\n\x1b7\x1b\[1;\d+r\x1b8\x1b\[1A")
REGION_RESET = re.compile(r"\x1b7\x1b\[1;\d+r\x1b\[\d+;1H\x1b\[2K\x1b8")
CTRL_C = "\x03"
#: terminal modes line editing may switch (bracketed paste, meta key): not text
MODES = re.compile(r"\x1b\[\?\d+[hl]")


def _own_terminal() -> None:
    """In the child, after `setsid`: make the pty its controlling terminal, with SIGINT's default action (a child
    started from a background job inherits an ignored SIGINT)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class TerminalSession:
    """`python -m cachelimit ARGV` on a `rows` x `columns` pseudo-terminal. With `echo_control` the terminal echoes
    a typed Ctrl-C as "^C", as a real one does by default (ECHOCTL); without it, as the bare byte, which `screen()`
    drops."""

    def __init__(self, argv: list[str], rows: int = 24, columns: int = 120, echo_control: bool = False):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        modes = termios.tcgetattr(slave)
        modes[3] = modes[3] | termios.ECHOCTL if echo_control else modes[3] & ~termios.ECHOCTL
        termios.tcsetattr(slave, termios.TCSANOW, modes)
        environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        environment.update(TERM="xterm", LINES=str(rows), COLUMNS=str(columns), INPUTRC=os.devnull)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cachelimit", *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environment,
            cwd=REPO,
            start_new_session=True,
            preexec_fn=_own_terminal,
        )
        os.close(slave)
        self.master, self.raw, self.rows = master, b"", rows

    def _read(self, timeout: float) -> bool:
        """Whatever the child wrote within `timeout` seconds; False once it has closed the terminal."""
        if not select.select([self.master], [], [], timeout)[0]:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # reading a pty whose writer has exited raises EIO
            return False
        self.raw += chunk
        return bool(chunk)

    def wait_for(self, done, timeout: float = 300) -> str:
        """Read until `done(screen)` holds; the screen. The first wait includes importing torch (slow on a loaded
        machine), hence the generous default; a test fails with the screen so far if it never comes."""
        deadline = time.monotonic() + timeout
        while not done(self.screen()):
            if time.monotonic() > deadline or not self._read(0.5):
                raise AssertionError(f"the terminal never showed what the test waits for; screen:\n{self.screen()}")
        return self.screen()

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def live_draws(self) -> list[str]:
        return LIVE_DRAW.findall(self.raw.decode(errors="replace"))

    def screen(self) -> str:
        text = self.raw.decode(errors="replace")
        for pattern in (LIVE_DRAW, REGION_SET, REGION_RESET, MODES):
            text = pattern.sub("", text)
        return text.replace("\r\n", "\n").replace(CTRL_C, "")

    def close(self, timeout: float = 120) -> int:
        """The exit status, once the child has ended (everything it wrote read first). Closing twice is harmless."""
        if self.master is not None:
            deadline = time.monotonic() + timeout
            while self.process.poll() is None and time.monotonic() < deadline:
                self._read(0.2)
            while self._read(0.2) and len(select.select([self.master], [], [], 0)[0]):
                pass
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None
        return self.process.wait(timeout=10)

    def kill(self) -> None:
        """For a test's cleanup: end the child if it still runs (a test that failed mid-chat), then close."""
        if self.process.poll() is None:
            self.process.kill()
        self.close(timeout=5)
