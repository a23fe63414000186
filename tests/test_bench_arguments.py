"""The benchmark commands refuse a bad flag or setting in one line, exit 2, before they measure anything."""

from __future__ import annotations

import pytest

from cachelimit.cli.main import run

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

BAD = [
    (["bench", "--limits", "0"], "cachelimit bench: error: argument --limits: must be an int in [1, "),
    (["bench", "--threads", "0"], "cachelimit bench: error: argument --threads: must be an int in [1, 1024], got 0"),
    (["bench", "--budget", "--sinks", "300"], "cachelimit bench --budget: error: --sinks must be in [0, --limit)"),
    (["bench", "--budget", "--threads", "-2"], "cachelimit bench --budget: error: argument --threads: must be an int"),
    (["bench", "--quality", "--limits", "64,abc"], "error: argument --limits: must be an int in [1, "),
    (["bench", "--quality", "--limits", ","], "error: argument --limits: expected comma-separated integers >= 1"),
    (["bench", "--quality", "--chunk", "0"], "cachelimit bench --quality: error: argument --chunk: must be an int in"),
    (["bench", "--quality", "--sample-tokens", "-1"], "error: argument --sample-tokens: must be an int in [0, "),
    (["bench", "--quality", "--tokens", "1"], "error: argument --tokens: must be `all` or an int in [2, "),
    (["bench", "--quality", "--seed", "1_0"], "error: argument --seed: must be an int in [0, 18446744073709551615]"),
    (["bench", "--quality", "--policy", "h2o"], "error: argument --policy: invalid choice: 'h2o'"),
    (["bench", "--quality", "--protected", "3"], "error: argument --protected: needs a scored --policy"),
    (
        ["bench", "--quality", "--policy", "keydiff", "--limits", "64", "--protected", "61"],
        "error: argument --protected: cache limit 64 with 4 sinks and --policy keydiff: `protected`",
    ),
    (["bench", "--quality", "--policy", "tova", "--limits", "4"], "error: argument --limits: cache limit 4 with 4 "),
    (
        ["bench", "--long", "--policy", "keydiff"],
        "cachelimit bench --long: error: argument --policy: `cachelimit bench",
    ),
    (["bench", "--budget", "--protected=3"], "cachelimit bench --budget: error: argument --protected: `cachelimit"),
    (["bench", "--policy", "tova"], "cachelimit bench: error: argument --policy: `cachelimit bench` has no such flag"),
    (["bench", "--recall", "--policy", "tova"], "argument --policy: `cachelimit bench --recall` has no such flag"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_a_bad_flag_is_one_line_and_exit_2(argv, expected, capsys, tmp_path):
    assert run([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written
