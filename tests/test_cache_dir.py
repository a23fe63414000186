"""A cache directory that cannot take the converted copy is refused before the conversion, naming the directory,
where it came from and how to choose another; from the command line as one line with exit status 1 (a model
that cannot be loaded). transformers' loaders fail loudly if a GGUF file reaches them (`no_dequantisation`),
so each test proves the error came first, in a second instead of after 20-85 s.
"""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from cachelimit.cli import pretrained
from cachelimit.cli.pretrained import CACHE_ENV, CacheDirError

from .cli_helpers import run_in_process
from .conversion_helpers import fake_conversion

UNPRIVILEGED = 65534  # nobody


@pytest.fixture
def no_dequantisation(monkeypatch, tmp_path) -> Path:
    return fake_conversion(monkeypatch, tmp_path, "forbidden")


def blocked(tmp_path: Path) -> tuple[Path, Path]:
    """(a file, a path below it)."""
    file = tmp_path / "taken"
    file.write_text("not a directory")
    return file, file / "cache"


def test_a_file_as_the_cache_dir_argument(no_dequantisation, tmp_path):
    file, _ = blocked(tmp_path)
    with pytest.raises(CacheDirError) as caught:
        pretrained.load_pretrained("smollm2", cache_dir=file)
    message = str(caught.value)
    assert message.startswith(f"the cache directory {str(file)!r} (the cache_dir argument) is a file")
    assert "pass another cache_dir=" in message and "\n" not in message
    assert isinstance(caught.value, OSError)


def test_a_parent_that_is_a_file_in_the_environment_variable(no_dequantisation, tmp_path, monkeypatch):
    file, below = blocked(tmp_path)
    monkeypatch.setenv(CACHE_ENV, str(below))
    with pytest.raises(CacheDirError) as caught:
        pretrained.load_pretrained("smollm2")
    message = str(caught.value)
    assert message.startswith(f"the cache directory {str(below)!r} (from ${CACHE_ENV}) cannot be created: ")
    assert f"{str(file)!r} is a file" in message
    assert f"set ${CACHE_ENV} (or pass cache_dir=) to choose another" in message


def test_the_xdg_default_is_named_as_such(no_dequantisation, tmp_path, monkeypatch):
    file, _ = blocked(tmp_path)
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(file))
    with pytest.raises(CacheDirError, match=r"\(from \$XDG_CACHE_HOME\) cannot be created: .* is a file"):
        pretrained.load_pretrained("smollm2")


def test_a_directory_that_cannot_be_written_to(monkeypatch):
    """Read-only for the loading user (mode 0555). root may write anywhere, so as root the load runs in a forked
    child that drops to an unprivileged user first (the test process's modules and fakes are inherited); its files
    live in a fresh directory under the system's temporary folder, which that user can reach."""
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)
        fake_conversion(monkeypatch, base, "forbidden")
        cache = base / "read-only"
        cache.mkdir(mode=0o555)
        kind, message = _load_as_unprivileged(cache) if os.geteuid() == 0 else _load(cache)
    finally:
        shutil.rmtree(base)
    assert kind == "CacheDirError", message
    assert message.startswith(f"the cache directory {str(cache)!r} (the cache_dir argument) is not writable (")
    assert "Permission denied" in message


def _load(cache: Path) -> tuple[str, str]:
    try:
        pretrained.load_pretrained("smollm2", cache_dir=cache)
    except Exception as error:  # the test reads which one
        return type(error).__name__, str(error)
    return "no error", ""


def _load_as_unprivileged(cache: Path) -> tuple[str, str]:
    for folder in cache.parents:  # the unprivileged user must reach the directory
        if not folder.stat().st_mode & stat.S_IXOTH:
            pytest.skip(f"{folder} cannot be traversed by an unprivileged user")
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no torch work here, only the checks before the conversion
        try:
            os.close(reader)
            os.setgid(UNPRIVILEGED)
            os.setuid(UNPRIVILEGED)
            os.write(writer, pickle.dumps(_load(cache)))
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.mark.parametrize("command", [["generate", "smollm2", "--chat", "hi"], ["demo", "--model", "smollm2"]])
def test_the_command_line_says_it_in_one_line_with_exit_status_1(no_dequantisation, tmp_path, monkeypatch, command):
    file, _ = blocked(tmp_path)
    monkeypatch.setenv(CACHE_ENV, str(file))
    if command[0] == "demo":
        command = [*command, "--out", str(tmp_path / "out")]
    result = run_in_process(command)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    expected = f"cachelimit: error: could not load 'smollm2': the cache directory {str(file)!r} (from ${CACHE_ENV})"
    assert result.stderr.startswith(expected)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_read_only_cache_that_holds_the_copy_still_loads(tmp_path, monkeypatch):
    """Only a conversion needs to write: a copy already there is read, whatever the directory's mode."""
    fake_conversion(monkeypatch, tmp_path, "tiny")
    cache = tmp_path / "shared"
    pretrained.load_pretrained("smollm2", cache_dir=cache)
    fake_conversion(monkeypatch, tmp_path, "forbidden")
    cache.chmod(0o555)
    try:
        model, _ = pretrained.load_pretrained("smollm2", cache_dir=cache)
    finally:
        cache.chmod(0o755)
    assert model.config.num_hidden_layers == 4
