"""A lane's stub leaves a mark when Triton unloads it (its `finalize` ran), so that the router's stub watches can
tell an unload from a death: at the server's shutdown, or on an operator's unload, a lane's stub exits as a killed
one does, and a watch that took it for a death would reload the lane (at shutdown that reload held tritonserver
past its exit timeout). A stub gone with its mark was unloaded; one gone without it died.

Marks are empty files in the temporary directory, one folder per tritonserver (its pid and start time), one file
per stub pid (`voxlane-unloads-<server pid>-<start ticks>/<stub pid>`); the watch removes a mark as it reads it, and
the launcher the whole folder once its server has exited (`remove_marks`).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from backend_python.stub_common.logs import stop_fault_reports
from backend_python.stub_common.procfs import START_TICKS, stat_fields

log = logging.getLogger("voxlane")


def folder(server_pid: int) -> Path:
    """One tritonserver's marks, named by its pid and its start time: the marks of a server that was killed are
    never removed, and a later server given the same pid took a stub's death for an unload (its streams hung)."""
    return Path(tempfile.gettempdir()) / f"voxlane-unloads-{server_pid}-{_start_ticks(server_pid)}"


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); "0" where it cannot be read."""
    fields = stat_fields(pid)
    return fields[START_TICKS].decode() if len(fields) > START_TICKS else "0"


def mark_unloaded(pid: int | None = None, server_pid: int | None = None) -> None:
    """This stub (or `pid`, a stub of `server_pid`) is being unloaded: called first in a lane's `finalize`."""
    if pid is None:
        stop_fault_reports()
    marks = folder(os.getppid() if server_pid is None else server_pid)
    try:
        marks.mkdir(exist_ok=True)
        (marks / str(os.getpid() if pid is None else pid)).touch()
    except OSError as exc:  # a watch then takes the exit for a death and reloads the lane: safe, if needless
        log.warning("could not mark this stub as unloaded: %s", exc)


def was_unloaded(pid: int, server_pid: int) -> bool:
    """Whether the stub `pid` of `server_pid` left its unload mark (which this removes)."""
    try:
        (folder(server_pid) / str(pid)).unlink()
    except FileNotFoundError:
        return False
    return True


def remove_marks(marks: Path) -> None:
    """Remove a server's folder of marks (`folder`, read while it ran: its start time goes with it)."""
    for mark in marks.glob("*"):
        mark.unlink(missing_ok=True)
    try:
        marks.rmdir()
    except FileNotFoundError:
        pass
