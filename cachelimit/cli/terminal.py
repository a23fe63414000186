"""What the command line shows while a model generates: the KV cache size, a live status line, streamed text.

The KV size is read from the cache object itself after every forward (a forward hook on the model), so it is
the memory the run really holds, for a `BoundedCache` and for transformers' unbounded caches alike.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from transformers import TextStreamer

from ..core.cache import kv_bytes
from ..hf.compat import output_cache, passed_cache

_SAVE, _RESTORE = "\x1b7", "\x1b8"
#: control characters a model may emit (ESC starts terminal commands), shown as `\xNN` text instead; newline and tab
#: are text
_CONTROLS = {code: f"\\x{code:02x}" for code in [*range(32), *range(127, 160)] if code not in (9, 10)}


def visible(text: str) -> str:
    """`text` with every control character but newline and tab written out as `\\xNN`, so a model's output
    cannot move the cursor, clear the screen or retitle the terminal."""
    return text.translate(_CONTROLS)


def format_bytes(count: int) -> str:
    return f"{count / 2**20:.2f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"


class KVMeter:
    """Records the KV cache size after every forward of `model` (`bytes`, and the most seen, `peak`); use as a context
    manager."""

    def __init__(self, model):
        self.model = model
        self.bytes = self.peak = 0
        self.handle = None

    def _read(self, module, args, kwargs, output) -> None:
        cache = output_cache(output)
        if cache is None:
            cache = passed_cache(kwargs)
        if cache is not None:
            self.bytes = kv_bytes(cache)
            self.peak = max(self.peak, self.bytes)

    def __enter__(self) -> KVMeter:
        self.handle = self.model.register_forward_hook(self._read, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


@contextlib.contextmanager
def no_control_echo(stream: TextIO | None = None) -> Iterator[None]:
    """While an answer streams: a terminal echoes a typed Ctrl-C as `^C` where the cursor is (ECHOCTL, on by
    default), in the middle of the answer's text. The block runs with ECHOCTL off on `stream`'s terminal (stdin by
    default), so the keystroke echoes as the bare control byte, which shows nothing; elsewhere nothing is changed."""
    saved = None
    with contextlib.suppress(Exception):  # no termios (Windows), no descriptor (a StringIO), not a terminal
        import termios

        descriptor = (stream or sys.stdin).fileno()
        if os.isatty(descriptor):
            saved = termios.tcgetattr(descriptor)
    if saved is None or not saved[3] & termios.ECHOCTL:
        yield
        return
    quiet = list(saved)
    quiet[3] = saved[3] & ~termios.ECHOCTL
    termios.tcsetattr(descriptor, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(descriptor, termios.TCSANOW, saved)


def _same_terminal(out: TextIO, err: TextIO) -> bool:
    try:
        return out.isatty() and err.isatty() and os.path.samestat(os.fstat(out.fileno()), os.fstat(err.fileno()))
    except (AttributeError, OSError, ValueError):
        return False


class StatusLine:
    """One line of run statistics on `err`, updated in place while text goes to `out`.

    When both streams are the same terminal a '\\r' line would overwrite the text, so the line is pinned to the
    terminal's bottom row instead (a scroll region keeps the text above it, as apt does); where that is not
    possible (a dumb terminal) only the final line is shown. Elsewhere, or when no text is streamed
    (`text_streams=False`): '\\r' updates, then a newline.
    """

    def __init__(
        self,
        out: TextIO | None = None,
        err: TextIO | None = None,
        min_interval: float = 0.1,
        text_streams: bool = True,
    ):
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.min_interval = min_interval
        self.columns, self.rows = shutil.get_terminal_size()
        shared = text_streams and _same_terminal(self.out, self.err)
        if shared and os.environ.get("TERM", "dumb") != "dumb" and self.rows >= 3:
            self.mode = "pinned"
        else:
            self.mode = "final" if shared else "inline"
        self.last_shown = 0.0
        self.started = False
        self.width = 0
        self.text_ends_line = True

    def start(self, header: str | None = None) -> None:
        """Print `header` on `err` and take the terminal's bottom row; nothing is shown before this, so a run
        that fails its checks prints its one error line alone."""
        if header is not None:
            self._to_err(header + "\n")
        if self.mode == "pinned" and not self.started:  # make room, keep the bottom row out of the scrolling
            self._to_err(f"\n{_SAVE}\x1b[1;{self.rows - 1}r{_RESTORE}\x1b[1A")
        self.started = True

    def __enter__(self) -> StatusLine:
        return self

    def __exit__(self, *exc) -> None:
        if self.mode == "pinned":
            if self.started:
                self._to_err(f"{_SAVE}\x1b[1;{self.rows}r\x1b[{self.rows};1H\x1b[2K{_RESTORE}")
            self.mode = "final"

    def _to_err(self, sequence: str) -> None:
        self.out.flush()
        self.err.write(sequence)
        self.err.flush()

    def write_text(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self.text_ends_line = text.endswith("\n")

    def show(self, line: str, force: bool = False) -> None:
        """Replace the status line (at most every `min_interval` seconds unless `force`)."""
        now = time.monotonic()
        if not force and now - self.last_shown < self.min_interval:
            return
        if not self.started:
            self.start()
        self.last_shown = now
        if self.mode == "pinned":
            self._to_err(f"{_SAVE}\x1b[{self.rows};1H\x1b[2K{line[: self.columns - 1]}{_RESTORE}")
        elif self.mode == "inline":
            self._to_err("\r" + line.ljust(self.width))
            self.width = len(line)

    def finish(self, line: str) -> None:
        """The last status, on a line of its own below the text."""
        self.__exit__()
        if not self.text_ends_line:
            self.write_text("\n")
        if self.mode == "inline":
            self._to_err("\r" + line.ljust(self.width) + "\n")
        else:
            self._to_err(line + "\n")


class LiveTextStreamer(TextStreamer):
    """Streams the new text to `status.out` and refreshes the status line after every generated token.

    Text is held back only while it may still change: up to the last space (a word can grow), but never more
    than `max_held` characters, so output without spaces (the tiny model's noise) streams too.
    `header` (stderr) and `prompt` (stdout) are printed when generation starts, after every check has passed.
    """

    def __init__(
        self,
        tokenizer,
        status: StatusLine,
        meter: KVMeter,
        label: str,
        header: str | None = None,
        prompt: str = "",
        max_held: int = 16,
    ):
        super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.status, self.meter, self.label, self.max_held = status, meter, label, max_held
        self.header, self.prompt = header, prompt
        self.generated = 0
        self.started = time.perf_counter()

    def put(self, value) -> None:
        if self.next_tokens_are_prompt:  # generate hands over the prompt once its checks have passed
            self.next_tokens_are_prompt = False
            self.status.start(self.header)
            self.status.write_text(self.prompt)
            self.started = time.perf_counter()
            return
        token_ids = value.reshape(-1).tolist()
        self.generated += len(token_ids)
        self.token_cache.extend(token_ids)
        text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
        if text.endswith("\n"):
            self.status.write_text(visible(text[self.print_len :]))
            self.token_cache, self.print_len = [], 0
        else:
            end = text.rfind(" ") + 1
            if len(text) - max(end, self.print_len) > self.max_held:
                end = len(text.rstrip("\ufffd"))  # a cut multi-byte character decodes as U+FFFD until complete
            if end > self.print_len:
                self.status.write_text(visible(text[self.print_len : end]))
                self.print_len = end
        self.status.show(self.line())

    def end(self) -> None:
        if self.token_cache:
            text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
            self.status.write_text(visible(text[self.print_len :]))
            self.token_cache, self.print_len = [], 0
        self.next_tokens_are_prompt = True

    def rate(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.generated / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        kv = self.meter.bytes
        return (
            f"[cachelimit] {self.generated:,} tokens | {self.rate():.1f} tok/s | "
            f"KV cache {format_bytes(kv)} ({kv:,} B) | {self.label}"
        )
