"""Is a sibling model's Python stub process alive? Read from /proc, with no request to the model.

Every Python-backend model runs in its own `triton_python_backend_stub` process, a child of
`tritonserver`, with its model's path on its command line. A stub that died is gone from /proc (or
a zombie until tritonserver reaps it).
"""
from __future__ import annotations

import os
from pathlib import Path

from backend_python.stub_common import unloads
from backend_python.stub_common.procfs import PARENT_PID, PROC, STATE, stat_fields

STUB = b"triton_python_backend_stub"


def find_stub(model: str, parent_pid: int, proc: Path = PROC) -> int | None:
    """The pid of `model`'s live stub among `parent_pid`'s children, or None (an exited one that
    tritonserver has not reaped yet may sit beside a reloaded one: it is skipped)."""
    needle = f"/{model}/".encode()
    for entry in proc.iterdir():
        if entry.name.isdigit() and _parent(entry.name, proc) == parent_pid:
            cmdline = _read(entry / "cmdline")
            if STUB in cmdline and needle in cmdline and is_alive(int(entry.name), proc):
                return int(entry.name)
    return None


def is_alive(pid: int, proc: Path = PROC) -> bool:
    fields = stat_fields(pid, proc)
    return bool(fields) and fields[STATE] not in (b"Z", b"X")


def _parent(pid: str, proc: Path) -> int | None:
    fields = stat_fields(pid, proc)
    return int(fields[PARENT_PID]) if len(fields) > PARENT_PID else None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process went away while we looked
        return b""


def stub_is_running(model: str) -> bool:
    """Whether a live stub process of `model` runs under this process's tritonserver."""
    pid = find_stub(model, os.getppid())
    return pid is not None and is_alive(pid)


class StubWatch:
    """Remembers `model`'s stub pid (found again after a reload) and says when it has died."""

    def __init__(self, model: str, parent_pid: int | None = None, proc: Path = PROC) -> None:
        self.model, self._proc = model, proc
        self._parent_pid = os.getppid() if parent_pid is None else parent_pid
        self._pid: int | None = None

    def is_dead(self) -> bool:
        """True once the stub found earlier has died (False while it lives or is not found yet).

        A stub replaced by a live one (an operator's reload: the old stub exits after the new one
        started) is not a death: the new one is watched instead. Nor is a stub that Triton unloaded (the
        server's shutdown, an operator's unload): it left its mark (`unloads.py`)."""
        if self._pid is None:
            self._pid = find_stub(self.model, self._parent_pid, self._proc)
            return False
        if is_alive(self._pid, self._proc):
            return False
        gone, self._pid = self._pid, find_stub(self.model, self._parent_pid, self._proc)
        if self._pid is not None and is_alive(self._pid, self._proc):
            return False
        self._pid = None  # found again after a reload
        return not unloads.was_unloaded(gone, self._parent_pid)
