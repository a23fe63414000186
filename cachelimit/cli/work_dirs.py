"""The working directory of a conversion in progress: who writes it, the modes its files get, and the sweep that
removes the ones a killed writer left behind.

Why: `cachelimit.pretrained` writes a converted copy (540 MB for SmolLM2) into a hidden temporary directory next
to its target and renames it into place, so a half-written copy is never read. A process killed on the way
(SIGKILL, the OOM killer) cannot remove that directory, so every such death leaked half a gigabyte. The sweep
must never remove a directory that another process is still writing, so a writer records who it is before it
writes anything, and a directory is removed only when its writer is provably gone:

- `writer.json` holds the host name, the boot id (`/proc/sys/kernel/random/boot_id`), the PID namespace
  (`/proc/self/ns/pid`), the PID and the process's start time (`/proc/PID/stat`, clock ticks since boot);
- when host, boot and PID namespace are this process's own, the writer is dead if no process has its PID, or if
  the process that has it started at another time (the PID was recycled);
- anything else cannot be decided from here (another machine or container sharing the directory, a system
  without /proc, a missing or unreadable record, a directory left by an earlier cachelimit that wrote no
  record): the directory is kept, unless it is named like a conversion's temporary directory and nothing in it
  has changed for `STALE_AFTER_S` (24 hours; a conversion takes minutes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path

RECORD = "writer.json"
STALE_AFTER_S = 24 * 3600


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if not readable."""
    text = _read(f"/proc/{pid}/stat")
    if text is None or ")" not in text:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name, in parentheses, may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _machine() -> dict:
    """What makes a PID meaningful: the same host, the same boot, the same PID namespace."""
    return {
        "host": socket.gethostname(),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "pid_namespace": _pid_namespace(),
    }


def make_work_dir(target: Path) -> Path:
    """A fresh hidden directory next to `target`, with this process recorded as its writer before anything else
    is written into it."""
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    record = {**_machine(), "pid": os.getpid(), "start_time": _start_time(os.getpid()), "created": time.time()}
    (work / RECORD).write_text(json.dumps(record) + "\n")
    return work


def writer_state(work: Path) -> str:
    """Whether the writer recorded in `work` is "alive", "dead" or "unknown" (the rules: module docstring)."""
    try:
        record = json.loads((work / RECORD).read_text())
        pid, start_time = int(record["pid"]), record["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"
    machine = _machine()
    if pid <= 0 or None in machine.values() or any(record.get(key) != value for key, value in machine.items()):
        return "unknown"
    now = _start_time(pid)
    if now is not None and start_time is not None:
        return "alive" if now == start_time else "dead"  # another start time: the PID was given to a new process
    try:
        os.kill(pid, 0)  # signal 0 sends nothing: it only asks whether the process exists
    except ProcessLookupError:
        return "dead"
    except OSError:  # it exists, but /proc hides it (hidepid), e.g. another user's process: it may be writing
        pass
    return "unknown"


def _idle_seconds(work: Path, now: float) -> float:
    """Seconds since anything in `work` (the directory itself included) last changed."""
    newest = work.lstat().st_mtime
    for folder, _, files in os.walk(work):
        for name in [folder, *(os.path.join(folder, file) for file in files)]:
            try:
                newest = max(newest, os.lstat(name).st_mtime)
            except OSError:
                continue
    return now - newest


def sweep_stale(parent: Path, name: str) -> list[Path]:
    """Remove the temporary directories of conversions of `name` in `parent` whose writer is dead, or that are
    undecidable and idle for `STALE_AFTER_S`; return the removed ones. Never raises: a directory that cannot be
    read or removed (a read-only shared cache) is left as it is."""
    # mkdtemp's names: "." + the target's name (NAME-VERSION-SIZE-tfMAJOR-vFORMAT) + "-" + 8 random characters
    pattern = re.compile(rf"\.{re.escape(name)}-.+-\d+-tf\d+-v\d+-[a-z0-9_]{{8}}")
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    now = time.time()
    for work in entries:
        try:
            if not pattern.fullmatch(work.name) or work.is_symlink() or not work.is_dir():
                continue
            state = writer_state(work)
            if state == "dead" or (state == "unknown" and _idle_seconds(work, now) > STALE_AFTER_S):
                shutil.rmtree(work, ignore_errors=True)
                if not work.exists():
                    removed.append(work)
        except OSError:
            continue
    return removed


def normal_modes(directory: Path) -> tuple[int, int]:
    """`(file mode, directory mode)` that the user's umask gives a file or a directory created normally, found by
    creating one of each in `directory` (reading the umask would need `os.umask`, which sets it process-wide)."""
    probe = Path(tempfile.mkdtemp(prefix=".mode-probe-", dir=directory))
    try:
        (probe / "file").touch()
        (probe / "dir").mkdir()
        return (probe / "file").stat().st_mode & 0o777, (probe / "dir").stat().st_mode & 0o777
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def give_normal_modes(work: Path, file_mode: int, directory_mode: int) -> None:
    """Every file and directory under `work` (itself included) gets the normal mode: `mkdtemp` makes the
    directory private (0700) and safetensors writes its file 0600, which would lock other users out of a
    shared cache directory."""
    for folder, folders, files in os.walk(work):
        os.chmod(folder, directory_mode)
        for file in files:
            os.chmod(os.path.join(folder, file), file_mode)
        for sub in folders:
            os.chmod(os.path.join(folder, sub), directory_mode)
