"""Resource figures of a running tritonserver and its Python-backend stubs, read from /proc (Linux)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

STUB = "triton_python_backend_stub"


@dataclass(frozen=True)
class ProcStat:
    name: str  # "tritonserver" or the stub's model name
    pid: int
    rss_kb: int
    num_threads: int


def server_processes(server_pid: int) -> dict[str, int]:
    """name -> pid of tritonserver and each stub it runs (a stub is named by its model)."""
    found = {"tritonserver": server_pid}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(entry) == server_pid:
            model = _stub_model(entry)
            if model is not None:
                found[model] = int(entry.name)
    return found


def stat(name: str, pid: int) -> ProcStat:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return ProcStat(name, pid, rss_kb=int(fields["VmRSS"].split()[0]), num_threads=int(fields["Threads"]))


def snapshot(server_pid: int) -> dict[str, ProcStat]:
    return {name: stat(name, pid) for name, pid in sorted(server_processes(server_pid).items())}


def _parent(proc_dir: Path) -> int | None:
    try:
        # the command name may hold spaces or parentheses: the fields after the last ')' are fixed
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # the process ended meanwhile


def _stub_model(proc_dir: Path) -> str | None:
    """The model name of a stub process (from its `<repository>/<model>/1/model.py` argument)."""
    try:
        argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not argv or not argv[0].endswith(STUB.encode()) or len(argv) < 2:
        return None
    return os.path.basename(os.path.dirname(os.path.dirname(argv[1].decode())))
