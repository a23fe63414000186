#!/usr/bin/env python3
"""Run cachelimit's tests against one transformers release, in its own virtualenv: one leg of the CI matrix.

    python3 tools/leg.py 5.24.0              # the full suite on transformers 5.24.0
    python3 tools/leg.py 4.57.6 --subset     # a quick representative subset
    python3 tools/leg.py 5.25.0 -- -k llama  # anything after `--` goes to pytest

The leg is the README's test command with another transformers pin: the same install steps (torch pinned
first, so no CUDA build is pulled in; the project with its test extras; any extra step the README adds),
in `.venvs/tf-<version>` instead of `.venv`, then pytest. Reusing the README command keeps every leg in step
with the main one. A release outside pyproject.toml's range (say, the one that came out today) is installed over
the newest supported one, so the leg shows what breaks before the range is widened. Only the standard
library is used: run it with any Python 3.10+.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PIN = re.compile(r"transformers==[0-9][0-9A-Za-z.]*")

#: A quick representative subset (`.ci/run` runs the release-dependent tests on every leg, docs/contributing/versions.md;
#: this is for a first look at a new release, about a minute). It covers every code path a transformers release can change under cachelimit: bounded
#: generation and sinks against their references for one family of each kind (GPT-2: learned positions;
#: Llama: RoPE; Mistral: RoPE with a native window, checked against transformers' own sliding window), the
#: cache implementations (transformers' static/quantized caches and its pipeline), the refusals, and the
#: cache's own layer API. Families added later share the same generate/cache/mask path and are run in full
#: on the newest release by the main leg.
SUBSET = (
    "tests/models/test_llama.py",
    "tests/models/test_gpt2.py",
    "tests/models/test_mistral.py",
    "tests/test_registry.py",
    "tests/test_bad_input.py",
    "tests/test_window_cache.py",
)


def readme_test_command() -> str:
    """The README's test command (the one `.ci/run` runs verbatim for the main leg)."""
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("python3 -m venv .venv &&") and "python -m pytest" in line:
            return line
    raise SystemExit("tools/leg.py: README.md has no test command (`python3 -m venv .venv && ... python -m pytest`)")


def supported_range() -> tuple[str, str, tuple[str, ...]]:
    """(oldest supported, first unsupported, release series left out between them), from cachelimit/hf/releases.py."""
    text = (REPO / "cachelimit" / "hf" / "releases.py").read_text(encoding="utf-8")
    oldest = re.search(r'OLDEST_SUPPORTED = "([^"]+)"', text).group(1)
    first_unsupported = re.search(r'FIRST_UNSUPPORTED = "([^"]+)"', text).group(1)
    excluded = tuple(re.findall(r'"(\d+\.\d+)"', re.search(r"EXCLUDED_SERIES = \(([^)]*)\)", text).group(1)))
    return oldest, first_unsupported, excluded


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def leg_command(version: str, venv: str, pytest_args: list[str]) -> str:
    """The README command for transformers `version` in `venv`: no linting (the main leg lints), own pytest."""
    steps = [step.strip() for step in readme_test_command().split("&&")]
    oldest, first_unsupported, excluded = supported_range()
    in_range = _key(oldest) <= _key(version) < _key(first_unsupported) and _key(version)[:2] not in map(_key, excluded)
    out = []
    for step in steps:
        if step.startswith(("ruff ", "python -m pytest")):
            continue
        step = step.replace(".venv", venv)
        if PIN.search(step):
            if in_range:
                step = PIN.sub(f"transformers=={version}", step)
            else:  # pip would refuse a pin outside pyproject.toml's range: install it over the newest supported one
                step = f"{PIN.sub('', step).strip()} && pip install transformers=={version}"
        out.append(step)
    out.append("python -c 'import transformers; print(\"transformers\", transformers.__version__)'")
    out.append(shlex.join(["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]))
    return " && ".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Arguments after `--` go to pytest.", allow_abbrev=False
    )
    parser.add_argument("version", help="the transformers release to test, e.g. 5.24.0")
    parser.add_argument("--subset", action="store_true", help="only the representative subset CI runs on extra legs")
    parser.add_argument("--venvs", default=".venvs", help="folder of the per-release virtualenvs (default .venvs)")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - (1 if "--" in argv else 0)])
    args.pytest_args = extra
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([a-z]+\d*)?", args.version):
        parser.error(f"version must look like 5.24.0, got {args.version!r}")
    venv = f"{args.venvs.rstrip('/')}/tf-{args.version}"
    tests = [*SUBSET] if args.subset else []
    command = leg_command(args.version, venv, [*tests, *args.pytest_args])
    if args.dry_run:
        print(command)
        return 0
    share = os.environ.get("CACHELIMIT_FAMILY_SHARE")
    what = "subset" if args.subset else " ".join(args.pytest_args) or "full suite"
    label = f"transformers {args.version} ({what}{f', family share {share}' if share else ''})"
    print(f"=== leg: {label} in {venv}", flush=True)
    start = time.monotonic()
    environment = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    status = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], cwd=REPO, env=environment).returncode
    result = "green" if status == 0 else f"RED (exit {status})"
    print(f"=== leg: {label}: {result} in {time.monotonic() - start:.0f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
