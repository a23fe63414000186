"""Progress for the benchmarks people wait on: a tqdm bar per run on a terminal, one line per finished run otherwise.

Why both: a quality run over 100k tokens or a budget run takes minutes to an hour on a small CPU, so someone at a
terminal needs to see that it moves (and how fast); the same benchmark run under `nohup` or into a log file would
fill the log with carriage-return redraws, so there each run writes one line when it finishes, nothing while it
runs. The bar goes to stderr (tqdm's habit), the finished-run lines to stdout, so `> log` keeps the lines. tqdm
is optional (`cachelimit[cli]`): without it a terminal gets the lines too.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class RunProgress:
    """One benchmark's runs: `run(label, total, unit)` opens the progress of one run, `finish(text)` closes it."""

    def __init__(self, runs: int, bar_stream: TextIO | None = None, line_stream: TextIO | None = None):
        self.runs, self.index = runs, 0
        self.bar_stream = bar_stream if bar_stream is not None else sys.stderr
        self.line_stream = line_stream if line_stream is not None else sys.stdout
        self.terminal = bool(getattr(self.bar_stream, "isatty", lambda: False)())

    def run(self, label: str, total: int, unit: str) -> RunBar:
        """The progress of the next run: `update(n)` as units are done, then `finish(text)` (or `close()`)."""
        self.index += 1
        return RunBar(self, f"[{self.index}/{self.runs}] {label}", total, unit)


class RunBar:
    """A tqdm bar on a terminal, a silent counter otherwise; either way `finish` writes one line."""

    def __init__(self, owner: RunProgress, label: str, total: int, unit: str):
        self.owner, self.label, self.total, self.done = owner, label, total, 0
        self.started = time.perf_counter()
        self.bar = None
        if owner.terminal:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(
                    total=total, unit=unit, desc=label, file=owner.bar_stream, dynamic_ncols=True, unit_scale=True
                )

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def update(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def finish(self, text: str) -> str:
        """Close the bar and write `label: text` as one line; returns the line."""
        self.close()
        line = f"{self.label}: {text}"
        print(line, file=self.owner.line_stream, flush=True)
        return line

    def __enter__(self) -> RunBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
