"""Run transformers' own model test suites against cachelimit, for every family it serves: the external test bed.

    python tests/external/run_peer_suite.py                      # every served family's file, all four modes
    python tests/external/run_peer_suite.py --rotate 3 --rotate-limit 10 --rotate-cut 3 --batch  # CI's rotation
    python tests/external/run_peer_suite.py --models gpt2 --modes limit -- -x -k generate

The suites are third-party (transformers' `tests/`, kept outside this repository: `--suite`, default
`../shared/peer-suite/transformers-tests` or `$CACHELIMIT_PEER_SUITE`); they are copied to a temporary directory
with `src/transformers` linked to the installed package, as their README says, and run with `peer_plugin.py`.
The files are chosen by `peer_plan` (every served family the suite has a file for); the named exceptions are
in `peer_reasons`. The run fails unless:

- every file and mode has no failure or error (the suite's own failures on this release are listed, with their
  reasons, in `peer_reasons.BASELINE`, and must still fail; cachelimit's design limits in `peer_reasons.SKIPS`
  are skipped in the bounded modes, and what a cutting bound changes, `peer_reasons.CUT`, in `limit-cut`) and
  at least one test passed; in `limit` mode (every `generate` defaults to `cache_limit=4096`,
  which never cuts: a call that grew past it fails the run) that is condition (b);
- (a) `patched` gives every test the outcome it has `unpatched`, wherever both ran;
- (c) in `limit-cut` (every `generate` defaults to `cache_limit=4`, shorter than every tester's prompt), some call
  was cut, and every cross-path test (`peer_reasons.CROSS_PATH`: two generation paths that must agree) that the
  file collects passed or was skipped by the suite itself, at least one of them passed.

Prints a table (counts and minutes per file and mode), then every check.
Needs pytest-xdist, pytest-rerunfailures, timeout-decorator and httpx (`pip install -e ".[external]"`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

import peer_plan
import peer_reasons
from peer_checks import checks, named_lists

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


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
    """test id -> passed / failed / error / skipped / xfailed (a listed baseline failure), from JUnit XML."""
    result = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag: child for child in case}
        kind = next((kind for kind in ("failure", "error", "skipped") if kind in kinds), "passed")
        if kind == "skipped" and kinds["skipped"].get("type") == "pytest.xfail":
            kind = "xfailed"
        result[f"{case.get('classname')}::{case.get('name')}"] = {"failure": "failed"}.get(kind, kind)
    return result


def children_cpu() -> float:
    """CPU seconds of every finished child process so far (pytest and its workers): what a run costs whatever else
    the machine is doing, where wall time on a shared machine depends on the neighbours."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def family_of(test_id: str) -> str:
    """The family whose file a JUnit test id comes from (`tests.models.<family>.test_modeling_<family>.Class::test`,
    or a collection error's `::tests.models.<family>.test_modeling_<family>`); "?" for anything else, which then
    fails the run."""
    head = next((part for part in test_id.split("::") if part), "")
    parts = head.replace("/", ".").split(".")
    return parts[2] if parts[:2] == ["tests", "models"] and len(parts) > 2 else "?"


def read_calls(folder: Path) -> dict[str, list[int]]:
    """model_type -> [generate calls bounded by the default limit, calls that chose their cache, bounded calls the
    limit cut], over the workers."""
    calls: dict[str, list[int]] = {}
    for path in sorted(folder.glob("*.json")):
        for family, counts in json.loads(path.read_text()).items():
            calls[family] = [a + b for a, b in zip(calls.get(family, [0, 0, 0]), counts, strict=True)]
    return calls


def run_files(
    root: Path,
    families: list[str],
    mode: str,
    out: Path,
    workers: int,
    extra: list[str],
    limit: int | None = None,
    timeout: float | None = None,
) -> tuple[dict[str, dict[str, str]] | None, dict[str, list[int]], float, float]:
    """One pytest run of `families`' files in `mode` (`limit`: the default cache_limit of a bounded mode): outcomes
    per family (None: stopped after `timeout` seconds), the plugin's generate calls per family (bounded modes),
    wall seconds and CPU seconds."""
    name = families[0] if len(families) == 1 else "batch"
    junit, calls = out / f"{name}-{mode}.xml", out / f"{name}-{mode}-calls"
    junit.unlink(missing_ok=True)  # a stale file from an earlier run must not stand in for this one
    shutil.rmtree(calls, ignore_errors=True)
    calls.mkdir()
    command = [sys.executable, "-m", "pytest", "-p", "peer_plugin", "-p", "no:cacheprovider", "-q", "-rfE"]
    command += [f"--junitxml={junit}", "--continue-on-collection-errors", *map(peer_plan.suite_file, families)]
    if workers > 1:
        command += ["-n", str(workers)]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "CACHELIMIT_PEER_MODE": mode,
        "CACHELIMIT_PEER_CALLS": str(calls),
        "HF_HUB_OFFLINE": "1",
        **({"CACHELIMIT_PEER_LIMIT": str(limit)} if limit is not None else {}),
    }
    if workers > 1:  # one torch thread per worker: the workers already take the cores (as tests/conftest.py does)
        environment.setdefault("OMP_NUM_THREADS", "1")
    started, cpu = time.monotonic(), children_cpu()
    with open(out / f"{name}-{mode}.log", "w") as log:
        # a session of its own: past `timeout`, pytest and its xdist workers are stopped together
        process = subprocess.Popen(
            [*command, *extra], cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None, {}, time.monotonic() - started, children_cpu() - cpu
    found: dict[str, dict[str, str]] = {family: {} for family in families}
    by_folder = {peer_plan.suite_name(family): family for family in families}
    for test, outcome in (outcomes(junit) if junit.exists() else {}).items():
        folder = family_of(test)
        found.setdefault(by_folder.get(folder, folder), {})[test] = outcome
    return found, read_calls(calls), time.monotonic() - started, children_cpu() - cpu


def choose(requested: str | None, found: peer_plan.Discovery, served: list[str], modes: list[str], suite: Path):
    """The families to run: all runnable ones, or `--models`, each checked (a family that would check nothing is
    refused with the reason; one not served yet only for its `unpatched` baseline)."""
    if requested is None:
        return found.runnable
    chosen = [name for name in requested.split(",") if name]
    for name in chosen:
        if not (suite / peer_plan.suite_file(name)).is_file() and name not in served:
            raise SystemExit(f"--models: {name} is neither served nor in the suite ({peer_plan.suite_file(name)})")
        if name in found.missing:
            raise SystemExit(f"--models: {name} is served but the suite has no {peer_plan.suite_file(name)}")
        if name in found.set_aside:
            raise SystemExit(f"--models: {name}'s file is set aside: {found.set_aside[name]}")
        if name not in served and modes != ["unpatched"]:
            raise SystemExit(
                f"--models: {name} is not served by cachelimit ({', '.join(served)}); patched and limit would check "
                "nothing, so only `--modes unpatched` (its baseline) runs it"
            )
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated families (default: every served family with a file)")
    parser.add_argument("--modes", default=",".join(peer_plan.MODES), help="comma-separated (default: %(default)s)")
    parser.add_argument(
        "--rotate", type=int, metavar="K", help="unpatched and patched on K files only: the day's rotation (peer_plan)"
    )
    parser.add_argument(
        "--rotate-limit", type=int, metavar="M", help="limit on M files only: the day's rotation (default: every file)"
    )
    parser.add_argument(
        "--rotate-cut",
        type=int,
        metavar="C",
        help="limit-cut on C files only: the day's rotation (default: every file)",
    )
    parser.add_argument(
        "--cut-limit",
        type=int,
        default=peer_plan.DEFAULT_LIMITS["limit-cut"],
        help="the default cache_limit of limit-cut; it must cut every tester's prompt (default: %(default)s)",
    )
    parser.add_argument(
        "--cut-tests",
        choices=("generation", "all"),
        default="generation",
        help="limit-cut runs the generation tests only (the others are limit's) or all (default: %(default)s)",
    )
    parser.add_argument("--day", type=int, default=peer_plan.utc_day(), help="rotation day (default: today, UTC)")
    parser.add_argument(
        "--suite", type=Path, default=default_suite(), help="transformers' tests (default: %(default)s)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("peer_suite_out"), help="logs, JUnit XML (default: %(default)s)"
    )
    parser.add_argument(
        "--deadline-min",
        type=float,
        metavar="M",
        help="stop after M wall minutes: a mode still running then is stopped, it and the modes after it are "
        "printed as NOT RUN and left out of the checks (CI: what is left of its time budget)",
    )
    parser.add_argument("--batch", action="store_true", help="one pytest per mode over its files (CI: faster)")
    parser.add_argument("-n", "--workers", type=int, default=1, help="pytest-xdist workers per file (default: 1)")
    parser.add_argument("pytest_args", nargs="*", help="after `--`: passed to pytest (e.g. -x -k generate)")
    args = parser.parse_args(argv)
    if not (args.suite / "tests" / "models").is_dir():
        parser.error(f"--suite: {str(args.suite)!r} does not hold transformers' tests/models")
    modes = [mode for mode in args.modes.split(",") if mode]
    if not modes or set(modes) - set(peer_plan.MODES):
        parser.error(f"--modes: choose from {', '.join(peer_plan.MODES)}, got {args.modes!r}")
    sizes = (("--rotate", args.rotate), ("--rotate-limit", args.rotate_limit), ("--rotate-cut", args.rotate_cut))
    for flag, value in (*sizes, ("--cut-limit", args.cut_limit)):
        if value is not None and value < 1:
            parser.error(f"{flag}: at least 1, got {value}")
    if args.deadline_min is not None and not args.deadline_min > 0:
        parser.error(f"--deadline-min: more than 0 minutes, got {args.deadline_min}")
    served = peer_plan.served_families()
    found = peer_plan.discover(args.suite, served, peer_reasons.FILES)
    families = choose(args.models, found, served, modes, args.suite)
    runs = peer_plan.plan(families, modes, args.rotate, args.day, args.rotate_limit, args.rotate_cut)
    print(f"served families: {len(served)}; with a file in the suite, run: {len(found.runnable)}")
    print(*found.lines(), sep="\n")
    if any(value is not None for _, value in sizes):
        for mode in modes:
            chosen = [family for family, m in runs if m == mode]
            every = " (every file)" if len(chosen) == len(families) else ""
            print(f"rotation, day {args.day}: {mode} on {len(chosen)}{every}: {', '.join(chosen)}")
    os.environ["CACHELIMIT_PEER_CUT_TESTS"] = args.cut_tests  # read by the plugin in limit-cut's pytest
    args.out = args.out.resolve()  # pytest runs in the suite's copy: a relative path would land there
    args.suite = args.suite.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], dict[str, str]] = {}
    header = ("file", "mode", "passed", "failed", "error", "skipped", "xfailed", "minutes", "cpu-min")
    print(f"{header[0]:<10} {header[1]:<10}", *(f"{name:>7}" for name in header[2:]))
    batches = peer_plan.batches(runs, args.batch)
    if not batches:
        parser.error("nothing to run: no family chosen")
    spent = [0.0, 0.0]  # wall, CPU seconds
    calls: dict[tuple[str, str], list[int]] = {}
    deadline = None if args.deadline_min is None else time.monotonic() + 60 * args.deadline_min
    not_run: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        root = prepare(args.suite, Path(work))
        for mode, chosen in batches:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                not_run.append(f"NOT RUN (past --deadline-min {args.deadline_min:g}): {mode} on {', '.join(chosen)}")
                continue
            limit = {"limit-cut": args.cut_limit}.get(mode, peer_plan.DEFAULT_LIMITS.get(mode))
            found, called, seconds, cpu = run_files(
                root, chosen, mode, args.out, args.workers, args.pytest_args, limit, left
            )
            if found is None:
                minutes = f"{seconds / 60:.1f}"
                not_run.append(f"NOT RUN (stopped at --deadline-min, {minutes} min in): {mode} on {', '.join(chosen)}")
                continue
            calls.update({(family, mode): counts for family, counts in called.items()})
            spent = [spent[0] + seconds, spent[1] + cpu]
            times = [f"{seconds / 60:>7.1f}", f"{cpu / 60:>7.1f}"]
            for family, tests in found.items():
                results[family, mode] = tests
                counts = Counter(tests.values())
                numbers = [f"{counts[kind]:>7}" for kind in header[2:7]]
                print(f"{family:<10} {mode:<10}", *numbers, *(times if len(chosen) == 1 else []), flush=True)
            if len(chosen) > 1:
                print(f"{mode + f' ({len(chosen)} files, one pytest)':<61}", *times, flush=True)
    print(f"{'all runs':<61} {spent[0] / 60:>7.1f} {spent[1] / 60:>7.1f}")
    if not_run:
        print(*not_run, sep="\n")
    if not results:  # only a deadline leaves nothing run: said above, and no check can fail on it
        print("nothing ran within --deadline-min: no check was made")
        return 0
    lines, ok = checks(results, calls)
    print(*lines, *named_lists(families, modes), sep="\n")
    print(f"logs and JUnit XML: {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
