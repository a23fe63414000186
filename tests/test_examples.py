"""Every script in examples/ runs as a user runs it, on the built-in tiny model, and shows the bound held.

The scripts are found by a glob (a new example is tested without a list to update) and each is run in its own
process (`python examples/NAME.py --tiny`, offline, from another directory, with the same messages on stdin for
the chat loop; the others ignore them), as a user copies and runs it. What a script prints is what it claims, so the
claims are checked: every `cache: H positions per layer after T tokens (limit L)` line has H <= L, and the last one
shows the bound reached (H == L < T: the run was longer than the cache, so the limit cut); every check a script
prints (`...: True`) holds; and nothing it does draws transformers' notice for the cache's pre-5.24 name (a script
that passes or reads `past_key_values` on 5.24 prints it on stderr). What the scripts exercise is tested exactly
elsewhere (against independent references); here the question is whether the examples a user copies work.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)


REPO = Path(__file__).resolve().parent.parent
#: every script of examples/ (`_support.py`, what they share, is imported by them, not run)
EXAMPLES = sorted(path for path in (REPO / "examples").glob("*.py") if not path.name.startswith("_"))
MESSAGES = "hello\nhow are you?\ntell me more\nand then?\n"  # the chat loop's turns, one per line
TIMEOUT_S = 300  # a process imports torch and transformers: seconds idle, much longer on a loaded 2-core machine
BOUND_LINE = re.compile(r"cache: (\d+) positions per layer after (\d+) tokens \(limit (\d+)\)")
CHECK_LINE = re.compile(r": (True|False)$")
#: the text transformers >= 5.24 prints when code passes or reads the cache as `past_key_values`
OLD_CACHE_NAME = "past_key_values"


def run_example(script: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="cachelimit-example-") as folder:
        return subprocess.run(
            [sys.executable, str(script), "--tiny"], input=MESSAGES, capture_output=True, text=True, cwd=folder,
            env=env, timeout=TIMEOUT_S,
        )  # fmt: skip


def bound_problems(stdout: str) -> list[str]:
    """What the printed cache lines and checks say that is wrong (nothing: [])."""
    bounds = [tuple(map(int, found)) for found in BOUND_LINE.findall(stdout)]
    if not bounds:
        return ["no `cache: H positions per layer after T tokens (limit L)` line"]
    problems = [f"holds {held} > limit {limit}" for held, _, limit in bounds if held > limit]
    held, tokens, limit = bounds[-1]
    if not held == limit < tokens:
        problems.append(f"the last run did not reach the bound: {held} held after {tokens} tokens, limit {limit}")
    checks = [line for line in stdout.splitlines() if CHECK_LINE.search(line)]
    problems += [f"a check failed: {line!r}" for line in checks if line.endswith("False")]
    return problems


def test_the_examples_are_found():
    assert len(EXAMPLES) >= 7, f"examples/ holds {[path.name for path in EXAMPLES]}"


@pytest.mark.parametrize("script", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_every_example_says_what_it_shows_and_how_to_run_it(script: Path):
    text = script.read_text(encoding="utf-8")
    docstring = re.match(r'"""(.+?)"""', text, re.DOTALL)
    assert docstring, f"{script.name} has no module docstring"
    assert f"python examples/{script.name}" in docstring.group(1), "the docstring does not say how to run it"
    assert "--tiny" in docstring.group(1), "the docstring does not name --tiny (the built-in model the test runs)"


@pytest.mark.parametrize("script", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_every_example_runs_and_holds_its_bound(script: Path):
    run = run_example(script)
    output = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert run.returncode == 0, f"{script.name} exited {run.returncode}\n{output}"
    problems = bound_problems(run.stdout)
    assert problems == [], f"{script.name}: {problems}\n{output}"
    assert OLD_CACHE_NAME not in run.stderr, f"{script.name} used the cache's old name\n{output}"


def test_the_checks_can_fail():
    """The checker itself: an unbounded cache, a bound never reached, a failed check and a missing line are caught."""
    good = "x: True\ncache: 64 positions per layer after 174 tokens (limit 64)\n"
    assert bound_problems(good) == []
    assert bound_problems(good.replace("64 positions", "173 positions"))
    assert bound_problems(good.replace("174 tokens", "60 tokens").replace("64 positions", "59 positions"))
    assert bound_problems(good.replace("True", "False"))
    assert bound_problems("x: True\n")
