"""The wheel built from this checkout is a package people can adopt: licensed, described, typed, runnable.

Built the way a user or an index builds it (`pip wheel .`), from a copy of the checkout without its build leftovers
(a stale `build/` would ship modules the tree no longer has), then read as a zip: what the wheel says about itself is
what pip and PyPI will say. One build, one test that lists everything missing at once (a test per item would build
once per pytest-xdist worker). The build backend is the one `pyproject.toml` asks for: the virtualenv's own setuptools
when it is recent enough (no download), otherwise pip's isolated build fetches it from the package index.
"""

from __future__ import annotations

import configparser
import email.parser
import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import cachelimit

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent
LICENCE = "Apache-2.0"
LICENCE_CLASSIFIER = "License :: OSI Approved :: Apache Software License"
AUTHORS = "The cachelimit authors"
CONSOLE_SCRIPT = ("cachelimit", "cachelimit.cli.main:main")
#: the first setuptools that writes an SPDX `License-Expression` (what pyproject.toml's build-system requires)
SETUPTOOLS_FOR_SPDX = Version("77")
#: what is never part of the package source (the .gitignore's build, cache and output folders, and git itself)
NOT_SOURCE = (".git", ".venv", ".venvs", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".*_cache")
NOT_SOURCE += (".hypothesis", "benchmarks/results", "cachelimit_out", "peer_suite_out")
BUILD_TIMEOUT_S = 600  # an isolated build installs setuptools first; a loaded 2-core machine takes ~40 s


def _installed_setuptools() -> Version | None:
    try:
        return Version(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        return None


def build_wheel(source: Path, out: Path) -> Path:
    """`pip wheel` of `source` into `out`; the one wheel it wrote (the build's output in the failure message)."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-input", "-q", "-w", str(out), str(source)]
    setuptools = _installed_setuptools()
    if setuptools is not None and setuptools >= SETUPTOOLS_FOR_SPDX:
        command.insert(4, "--no-build-isolation")
    run = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if run.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise AssertionError(f"expected one wheel in {out}, found {[wheel.name for wheel in wheels]}")
    return wheels[0]


def copy_checkout(destination: Path) -> Path:
    """The checkout's source files (tracked or not, as `pip wheel .` would see them) without build leftovers."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        relative = Path(folder).relative_to(REPO)
        return {name for name in names if any((relative / name).match(pattern) for pattern in NOT_SOURCE)}

    return Path(shutil.copytree(REPO, destination / "src", ignore=ignore))


class Wheel:
    """A built wheel's names, metadata and dist-info files."""

    def __init__(self, path: Path):
        self.path = path
        with zipfile.ZipFile(path) as archive:
            self.names = set(archive.namelist())
            self.files = {name: archive.read(name) for name in self.names if ".dist-info/" in name}
        dist_infos = {name.split("/", 1)[0] for name in self.names if name.split("/", 1)[0].endswith(".dist-info")}
        if len(dist_infos) != 1:
            raise AssertionError(f"{path.name}: expected one .dist-info folder, found {sorted(dist_infos)}")
        self.dist_info = dist_infos.pop()
        self.metadata = email.parser.Parser().parsestr(self.text("METADATA"))

    def text(self, name: str) -> str:
        return self.files.get(f"{self.dist_info}/{name}", b"").decode("utf-8")

    def all(self, field: str) -> list[str]:
        return self.metadata.get_all(field) or []


def licence_problems(wheel: Wheel) -> list[str]:
    """The licence in the metadata (PEP 639's expression, or the classic field with its classifier) and its file."""
    problems = []
    classifiers = wheel.all("Classifier")
    expression, classic = wheel.metadata.get("License-Expression"), wheel.metadata.get("License")
    if expression is not None:
        if expression != LICENCE:
            problems.append(f"License-Expression is {expression!r}, not {LICENCE!r}")
    elif classic is None or LICENCE not in classic or LICENCE_CLASSIFIER not in classifiers:
        problems.append(
            f"no licence metadata: neither License-Expression: {LICENCE} nor License: {LICENCE} with the classifier "
            f"{LICENCE_CLASSIFIER!r} (License={classic!r})"
        )
    other = [c for c in classifiers if c.startswith("License ::") and c != LICENCE_CLASSIFIER]
    if other:
        problems.append(f"classifiers name another licence: {other}")
    if "LICENSE" not in wheel.all("License-File"):
        problems.append(f"License-File does not name LICENSE (got {wheel.all('License-File')})")
    shipped = [name for name in wheel.files if name.rsplit("/", 1)[-1] == "LICENSE"]
    text = wheel.files[shipped[0]] if shipped else b""
    if not shipped:
        problems.append(f"no LICENSE file in {wheel.dist_info}")
    elif any(wheel.files[name] != (REPO / "LICENSE").read_bytes() for name in shipped):
        problems.append(f"{shipped} differs from the checkout's LICENSE")
    elif b"Apache License" not in text or b"Version 2.0, January 2004" not in text:
        problems.append(f"{shipped[0]} is not the Apache License 2.0 text")
    return problems


def metadata_problems(wheel: Wheel) -> list[str]:
    """Name, version, authors, Python range, dependencies and the classifiers a typed library declares."""
    problems = []
    version = cachelimit.__version__
    if wheel.metadata.get("Name") != "cachelimit":
        problems.append(f"Name is {wheel.metadata.get('Name')!r}")
    if wheel.metadata.get("Version") != version or not wheel.path.name.startswith(f"cachelimit-{version}-"):
        problems.append(f"version {wheel.metadata.get('Version')!r} ({wheel.path.name}) is not __version__ {version}")
    authors = (wheel.metadata.get("Author") or "") + (wheel.metadata.get("Author-email") or "")
    if AUTHORS not in authors:
        problems.append(f"authors are {authors!r}, not {AUTHORS!r}")
    if wheel.metadata.get("Requires-Python") != ">=3.10":
        problems.append(f"Requires-Python is {wheel.metadata.get('Requires-Python')!r}")
    transformers = [r for r in wheel.all("Requires-Dist") if r.split(";")[0].strip().startswith("transformers")]
    declared = SpecifierSet(transformers[0][len("transformers") :]) if len(transformers) == 1 else None
    if declared != SpecifierSet(cachelimit.SUPPORTED_RANGE):
        problems.append(f"Requires-Dist transformers {transformers} is not the supported {cachelimit.SUPPORTED_RANGE}")
    wanted = ["Typing :: Typed", *(f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12))]
    problems += [f"classifier {c!r} missing" for c in wanted if c not in wheel.all("Classifier")]
    if "text/markdown" not in (wheel.metadata.get("Description-Content-Type") or ""):
        problems.append("the description (README.md) is not declared as Markdown")
    return problems


def content_problems(wheel: Wheel) -> list[str]:
    """Every module of the package, the PEP 561 marker, and a console script that resolves."""
    problems = []
    package = REPO / "cachelimit"
    modules = {path.relative_to(REPO).as_posix() for path in package.rglob("*.py") if "__pycache__" not in path.parts}
    missing = sorted(modules - wheel.names)
    if missing:
        problems.append(f"modules missing from the wheel: {missing}")
    if "cachelimit/py.typed" not in wheel.names:
        problems.append("cachelimit/py.typed (PEP 561 marker) missing from the wheel")
    entry_points = configparser.ConfigParser(delimiters=("=",))
    entry_points.optionxform = str
    entry_points.read_string(wheel.text("entry_points.txt"))
    name, target = CONSOLE_SCRIPT
    scripts = dict(entry_points["console_scripts"]) if entry_points.has_section("console_scripts") else {}
    if scripts.get(name) != target:
        problems.append(f"console script {name} = {target} missing (console_scripts: {scripts})")
    else:
        module, attribute = target.split(":")
        if not callable(getattr(importlib.import_module(module), attribute, None)):
            problems.append(f"the console script's target {target} is not a callable")
    return problems


class WheelTest(unittest.TestCase):
    def test_the_wheel_ships_licence_metadata_types_and_script(self):
        with tempfile.TemporaryDirectory(prefix="cachelimit-wheel-") as folder:
            wheel = Wheel(build_wheel(copy_checkout(Path(folder)), Path(folder) / "dist"))
        problems = licence_problems(wheel) + metadata_problems(wheel) + content_problems(wheel)
        self.assertEqual(problems, [], f"{wheel.path.name}:\n- " + "\n- ".join(problems))


if __name__ == "__main__":
    unittest.main()
