"""Benchmark progress (`cachelimit.bench.progress`): a tqdm bar per run on a terminal, one line per finished run
when the output goes to a file (a log must not fill with bar redraws, and must still say what finished)."""

from __future__ import annotations

import io

import pytest

from cachelimit.bench.progress import RunProgress

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_file_gets_one_line_per_finished_run_and_no_bar():
    bars, lines = io.StringIO(), io.StringIO()
    progress = RunProgress(2, bar_stream=bars, line_stream=lines)
    with progress.run("dense", total=100, unit="token") as bar:
        bar.update(60)
        bar.update(40)
        assert bar.bar is None and bar.done == 100
        bar.finish("perplexity 9.99")
    with progress.run("window L=4", total=10, unit="token") as bar:
        bar.finish("done")
    assert bars.getvalue() == ""
    assert lines.getvalue() == "[1/2] dense: perplexity 9.99\n[2/2] window L=4: done\n"


def test_a_terminal_gets_a_bar_and_the_finished_line():
    bars, lines = Terminal(), io.StringIO()
    progress = RunProgress(1, bar_stream=bars, line_stream=lines)
    with progress.run("dense", total=100, unit="token") as bar:
        assert bar.bar is not None
        bar.update(100)
        bar.finish("ok")
    assert "[1/1] dense" in bars.getvalue() and "100/100" in bars.getvalue()
    assert lines.getvalue() == "[1/1] dense: ok\n"


def test_a_run_that_raises_closes_its_bar():
    progress = RunProgress(1, bar_stream=Terminal(), line_stream=io.StringIO())
    run = progress.run("dense", total=3, unit="token")
    try:
        with run:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert run.bar is None
