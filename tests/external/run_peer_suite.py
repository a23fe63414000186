"""Run transformers' own model test suites (GPT-2, Llama, Mistral) against cachelimit: the external test bed.

    python tests/external/run_peer_suite.py                      # all three files, modes unpatched/patched/limit
    python tests/external/run_peer_suite.py --models gpt2 --modes limit -- -x -k generate

The suites are third-party (transformers' `tests/`, kept outside this repository: `--suite`, default
`../shared/peer-suite/transformers-tests` or `$CACHELIMIT_PEER_SUITE`); they are copied to a temporary directory
with `src/transformers` linked to the installed package, as their README says, and run with `peer_plugin.py`:

- (a) `patched` must give every test the outcome it has `unpatched` (0 regressions);
- (b) `limit` (every `generate` defaults to `cache_limit=4096`) must have no failures apart from the named skips
  in `peer_plugin.SKIPS`.

Prints a table (counts and minutes per file and mode) and exits 1 if (a) or (b) does not hold.
Needs pytest-xdist, pytest-rerunfailures, timeout-decorator and httpx (`pip install -e ".[external]"`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODELS = ("gpt2", "llama", "mistral")
MODES = ("unpatched", "patched", "limit")


def default_suite() -> Path:
    return Path(os.environ.get("CACHELIMIT_PEER_SUITE", REPO.parent / "shared" / "peer-suite" / "transformers-tests"))


def prepare(suite: Path, work: Path) -> Path:
    """A writable copy of the suite with `src/transformers` pointing at the installed package."""
    import transformers

    root = work / "transformers-tests"
    shutil.copytree(suite, root, symlinks=True)
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "transformers").symlink_to(Path(transformers.__file__).parent)
    return root


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    result = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        result[test_id] = next((kind for kind in ("failure", "error", "skipped") if kind in kinds), "passed")
        result[test_id] = {"failure": "failed"}.get(result[test_id], result[test_id])
    return result


def run_one(root: Path, model: str, mode: str, out: Path, workers: int, extra: list[str]) -> tuple[dict, float]:
    junit = out / f"{model}-{mode}.xml"
    command = [sys.executable, "-m", "pytest", "-p", "peer_plugin", "-p", "no:cacheprovider", "-q", "-rfE"]
    command += [f"--junitxml={junit}", f"tests/models/{model}/test_modeling_{model}.py"]
    if workers > 1:
        command += ["-n", str(workers)]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "CACHELIMIT_PEER_MODE": mode,
        "HF_HUB_OFFLINE": "1",
    }
    started = time.monotonic()
    with open(out / f"{model}-{mode}.log", "w") as log:
        subprocess.run([*command, *extra], cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT)
    return (outcomes(junit) if junit.exists() else {}), time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: %(default)s)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated (default: %(default)s)")
    parser.add_argument(
        "--suite", type=Path, default=default_suite(), help="transformers' tests (default: %(default)s)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("peer_suite_out"), help="logs, JUnit XML (default: %(default)s)"
    )
    parser.add_argument("-n", "--workers", type=int, default=1, help="pytest-xdist workers per file (default: 1)")
    parser.add_argument("pytest_args", nargs="*", help="after `--`: passed to pytest (e.g. -x -k generate)")
    args = parser.parse_args(argv)
    if not (args.suite / "tests" / "models").is_dir():
        parser.error(f"--suite: {str(args.suite)!r} does not hold transformers' tests/models")
    models, modes = args.models.split(","), args.modes.split(",")
    args.out = args.out.resolve()  # pytest runs in the suite's copy: a relative path would land there
    args.suite = args.suite.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], dict[str, str]] = {}
    failed = False
    with tempfile.TemporaryDirectory() as work:
        root = prepare(args.suite, Path(work))
        print(f"{'file':<8} {'mode':<10} {'passed':>6} {'failed':>6} {'error':>5} {'skipped':>7} {'minutes':>7}")
        for model in models:
            for mode in modes:
                found, seconds = run_one(root, model, mode, args.out, args.workers, args.pytest_args)
                results[model, mode] = found
                counts = Counter(found.values())
                print(
                    f"{model:<8} {mode:<10} {counts['passed']:>6} {counts['failed']:>6} {counts['error']:>5} "
                    f"{counts['skipped']:>7} {seconds / 60:>7.1f}",
                    flush=True,
                )
                if not counts["passed"]:  # no JUnit XML or nothing ran: a run that checked nothing is a failure
                    print(f"    {model} {mode}: no test passed; see {args.out / f'{model}-{mode}.log'}")
                    failed = True
    for model in models:
        if {"unpatched", "patched"} <= set(modes):
            base, patched = results[model, "unpatched"], results[model, "patched"]
            changed = sorted(test for test in base.keys() | patched.keys() if base.get(test) != patched.get(test))
            print(f"(a) {model}: {len(changed)} outcome(s) differ patched vs unpatched")
            for test in changed:
                print(f"    {test}: {base.get(test)} -> {patched.get(test)}")
            failed |= bool(changed)
        if "limit" in modes:
            base = results.get((model, "unpatched"), {})
            bad = sorted(
                test
                for test, outcome in results[model, "limit"].items()
                if outcome in ("failed", "error") and base.get(test) not in ("failed", "error")
            )
            print(f"(b) {model}: {len(bad)} failure(s) with the default cache_limit (baseline failures excluded)")
            for test in bad:
                print(f"    {test}")
            failed |= bool(bad)
    print(f"logs and JUnit XML: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
