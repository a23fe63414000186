"""The real model's converted copy on disk: the modes of its files, and the temporary directories of conversions
that were killed half-way (`cachelimit.cli.work_dirs`), with the conversion itself stood in by the tiny model
(`conversion_helpers`), so no test waits for the 20-85 s dequantisation.

Writers are real processes: a child that is converting (killed with SIGKILL, as the OOM killer does), a child that
exits without cleaning up, this test process itself. A recycled PID and records from elsewhere are written by hand.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachelimit.cli import pretrained, work_dirs

from .cli_helpers import REPO
from .conversion_helpers import FAKE_VERSION, fake_conversion, hidden_dirs, modes

LINUX_PROC = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the writer rules need Linux's /proc")
DAY = 24 * 3600

# A child that converts with the stand-in (tests/conversion_helpers) and hangs inside save_file, as a conversion
# does while it writes its 540 MB.
HANGING_CONVERSION = """
import sys, time
from pathlib import Path
import pytest, safetensors.torch
from tests.conversion_helpers import fake_conversion
from cachelimit.cli import pretrained

def hang(tensors, path, *args, **kwargs):
    Path(path).write_bytes(b"half a model")
    print("writing", flush=True)
    time.sleep(600)

with pytest.MonkeyPatch.context() as monkeypatch:
    fake_conversion(monkeypatch, Path(sys.argv[1]))
    monkeypatch.setattr(safetensors.torch, "save_file", hang)
    pretrained._convert("smollm2", Path(sys.argv[2]))
"""

# A child that becomes a writer and leaves without removing its directory.
WRITER_THAT_EXITS = """
import os, sys
from pathlib import Path
from cachelimit.cli import work_dirs
print(work_dirs.make_work_dir(Path(sys.argv[1])), flush=True)
os._exit(0)
"""


def child(script: str, *args: str, **options) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=environment, cwd=REPO, **options
    )


@pytest.fixture
def converts_tiny(monkeypatch, tmp_path) -> Path:
    return fake_conversion(monkeypatch, tmp_path, "tiny")


@pytest.fixture
def target(converts_tiny, tmp_path) -> Path:
    """Where the converted copy goes, in a cache directory of this test's own."""
    path = pretrained.converted_dir("smollm2", tmp_path / "cache")
    assert path.name.startswith(f"smollm2-{FAKE_VERSION}-")
    path.parent.mkdir(parents=True)
    return path


def test_each_major_transformers_release_converts_its_own_copy(converts_tiny, tmp_path, monkeypatch):
    """A 5.x copy's tokenizer file is one 4.x cannot read: the two never share a converted copy."""
    here = pretrained.converted_dir("smollm2", tmp_path)
    version = importlib.metadata.version
    other = "4.57.6" if version("transformers").startswith("5.") else "5.24.0"
    monkeypatch.setattr(importlib.metadata, "version", lambda name: other if name == "transformers" else version(name))
    there = pretrained.converted_dir("smollm2", tmp_path)
    assert here != there and here.name.replace(f"-tf{version('transformers')[0]}-", "-tf?-") == there.name.replace(
        f"-tf{other[0]}-", "-tf?-"
    )


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002], ids=lambda umask: f"umask_{umask:03o}")
def test_every_file_of_the_copy_gets_the_mode_the_umask_gives(converts_tiny, tmp_path, umask):
    previous = os.umask(umask)
    try:
        pretrained.load_pretrained("smollm2", cache_dir=tmp_path / "cache")
    finally:
        os.umask(previous)
    (copy,) = (tmp_path / "cache").iterdir()
    found = modes(copy)
    assert "model.safetensors" in found and "config.json" in found and "tokenizer.json" in found
    directories = {name for name in found if (copy / name).is_dir()}
    expected = {name: (0o777 if name in directories else 0o666) & ~umask for name in found}
    assert found == expected


@LINUX_PROC
def test_a_killed_conversion_is_kept_while_it_writes_and_removed_by_the_next_load(target, tmp_path):
    writer = child(HANGING_CONVERSION, str(tmp_path / "child"), str(target))
    try:
        assert writer.stdout.readline().strip() == "writing"
        (work,) = hidden_dirs(target.parent)
        assert (work / "model.safetensors").read_bytes() == b"half a model"
        pretrained.load_pretrained("smollm2", cache_dir=target.parent)  # converts; the writer is alive
        assert hidden_dirs(target.parent) == [work] and (work / "model.safetensors").is_file()
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    assert hidden_dirs(target.parent) == [work]  # SIGKILL: nothing ran to clean up
    pretrained.load_pretrained("smollm2", cache_dir=target.parent)
    assert hidden_dirs(target.parent) == []
    assert (target / "model.safetensors").is_file() and not (target / work_dirs.RECORD).exists()


@LINUX_PROC
def test_the_directory_of_this_live_process_is_kept(target):
    work = work_dirs.make_work_dir(target)
    assert work_dirs.writer_state(work) == "alive"
    assert work_dirs.sweep_stale(target.parent, "smollm2") == []
    assert work.is_dir()


@LINUX_PROC
def test_a_writer_that_exited_is_dead_and_its_directory_removed(target):
    writer = child(WRITER_THAT_EXITS, str(target))
    work = Path(writer.stdout.readline().strip())
    assert writer.wait(timeout=60) == 0
    assert work_dirs.writer_state(work) == "dead"
    assert work_dirs.sweep_stale(target.parent, "smollm2") == [work]
    assert not work.exists()


def rewrite_record(work: Path, **changes) -> None:
    record = json.loads((work / work_dirs.RECORD).read_text())
    (work / work_dirs.RECORD).write_text(json.dumps({**record, **changes}))


def age(work: Path, seconds: float) -> None:
    """Make everything in `work` look untouched for `seconds`."""
    then = time.time() - seconds
    for path in [*work.rglob("*"), work]:
        os.utime(path, (then, then))


@LINUX_PROC
def test_a_recycled_pid_does_not_keep_a_dead_writer_alive(target):
    """The PID now belongs to a process that started at another time (here: this one, which did not write it)."""
    work = work_dirs.make_work_dir(target)
    record = json.loads((work / work_dirs.RECORD).read_text())
    rewrite_record(work, start_time=record["start_time"] - 1)
    assert work_dirs.writer_state(work) == "dead"
    assert work_dirs.sweep_stale(target.parent, "smollm2") == [work]


UNDECIDABLE = [
    ("another_host", {"host": "some-other-machine"}),
    ("another_boot", {"boot_id": "00000000-0000-0000-0000-000000000000"}),
    ("another_pid_namespace", {"pid_namespace": "pid:[1]"}),
    ("no_start_time", {"start_time": None}),
]


@LINUX_PROC
@pytest.mark.parametrize("name, changes", UNDECIDABLE, ids=[case[0] for case in UNDECIDABLE])
def test_a_writer_that_cannot_be_checked_is_kept_until_idle_for_a_day(target, name, changes):
    work = work_dirs.make_work_dir(target)
    rewrite_record(work, **changes)
    assert work_dirs.writer_state(work) == "unknown"
    age(work, DAY - 600)
    assert work_dirs.sweep_stale(target.parent, "smollm2") == [] and work.is_dir()
    age(work, DAY + 600)
    assert work_dirs.sweep_stale(target.parent, "smollm2") == [work]


def test_a_directory_without_a_record_is_kept_until_idle_for_a_day(target):
    """What cachelimit wrote before writers were recorded; the rule holds without /proc too."""
    work = target.parent / f".{target.name}-ab12cd_9"
    work.mkdir()
    (work / "model.safetensors").write_bytes(b"half a model")
    assert work_dirs.writer_state(work) == "unknown"
    age(work, DAY - 600)
    assert work_dirs.sweep_stale(target.parent, "smollm2") == []
    (work / "model.safetensors").touch()  # a write refreshes it
    age(work, DAY + 600)
    assert work_dirs.sweep_stale(target.parent, "smollm2") == [work]


def test_what_is_not_named_like_a_conversion_is_never_touched(target):
    others = [target.parent / name for name in (".smollm2-notes", ".other-model-1-2-v1-abcdefgh", "smollm2-x")]
    for path in others:
        path.mkdir()
        age(path, 30 * DAY)
    link = target.parent / f".{target.name}-linkedxx"
    link.symlink_to(others[0], target_is_directory=True)
    assert work_dirs.sweep_stale(target.parent, "smollm2") == []
    assert all(path.is_dir() for path in [*others, link])


def test_a_cache_directory_that_cannot_be_listed_is_no_error(tmp_path):
    assert work_dirs.sweep_stale(tmp_path / "missing", "smollm2") == []
    (tmp_path / "file").write_text("")
    assert work_dirs.sweep_stale(tmp_path / "file", "smollm2") == []
