"""A lane's stub leaves a mark when Triton unloads it (its `finalize` ran), so that the router's stub watches can
tell an unload from a death: at the server's shutdown, or on an operator's unload, a lane's stub exits as a killed
one does, and a watch that took it for a death would reload the lane (at shutdown that reload held tritonserver
past its exit timeout). A stub gone with its mark was unloaded; one gone without it died.

Marks are empty files in the temporary directory, one folder per tritonserver (its pid), one file per stub pid
(`voxlane-unloads-<server pid>/<stub pid>`); the watch removes a mark as it reads it.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("voxlane")


def _folder(server_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"voxlane-unloads-{server_pid}"


def mark_unloaded(pid: int | None = None, server_pid: int | None = None) -> None:
    """This stub (or `pid`, a stub of `server_pid`) is being unloaded: called first in a lane's `finalize`."""
    folder = _folder(os.getppid() if server_pid is None else server_pid)
    try:
        folder.mkdir(exist_ok=True)
        (folder / str(os.getpid() if pid is None else pid)).touch()
    except OSError as exc:  # a watch then takes the exit for a death and reloads the lane: safe, if needless
        log.warning("could not mark this stub as unloaded: %s", exc)


def was_unloaded(pid: int, server_pid: int) -> bool:
    """Whether the stub `pid` of `server_pid` left its unload mark (which this removes)."""
    try:
        (_folder(server_pid) / str(pid)).unlink()
    except FileNotFoundError:
        return False
    return True
