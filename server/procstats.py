"""Resource figures of a running tritonserver and its Python-backend stubs, read from /proc (Linux).

    python -m tools.procstats --server-pid PID --every 15 > memory.csv    # (tools/procstats.py) samples until the server ends
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

STUB = "triton_python_backend_stub"


@dataclass(frozen=True)
class ProcStat:
    name: str  # "tritonserver" or the stub's model name
    pid: int
    rss_kb: int
    num_threads: int
    shmem_kb: int = 0  # of rss_kb, the shared-memory pages (the Python backend's pools, which tritonserver and a stub share)

    @property
    def private_kb(self) -> int:
        """RSS less shared memory: the process's own heap, stacks and code."""
        return self.rss_kb - self.shmem_kb


PROC = Path("/proc")


def server_processes(server_pid: int, proc: Path = PROC) -> dict[str, int]:
    """name -> pid of tritonserver and each stub it runs (a stub is named by its model)."""
    found = {"tritonserver": server_pid}
    for entry in proc.iterdir():
        if entry.name.isdigit() and _parent(entry) == server_pid:
            model = _stub_model(entry)
            if model is not None:
                found[model] = int(entry.name)
    return found


class ServerProcesses:
    """`server_processes` for a watch that asks every half second: the processes the last scan of /proc found
    are checked by pid (each still runs, as the server's child, and is the process that scan saw: same start
    time), and /proc is scanned again only when one is not, or when `expected` names a model it did not find.
    A scan reads every process's stat: tens of milliseconds on a host of thousands of processes."""

    def __init__(self, server_pid: int, expected=(), proc: Path = PROC) -> None:
        self.server_pid, self.expected, self._proc = server_pid, frozenset(expected), proc
        self._found: dict[str, tuple[int, str]] = {}  # name -> (pid, start time)
        self.num_scans = 0

    def __call__(self) -> dict[str, int]:
        if not self._found or not self.expected <= self._found.keys() or not all(
                self._is_same(name, pid, started) for name, (pid, started) in self._found.items()):
            self.num_scans += 1
            found = server_processes(self.server_pid, self._proc)
            self._found = {name: (pid, started) for name, pid in found.items()
                           if (started := _start_time(_stat_fields(self._proc / str(pid)))) is not None}
        return {"tritonserver": self.server_pid, **{name: pid for name, (pid, _) in self._found.items()}}

    def _is_same(self, name: str, pid: int, started: str) -> bool:
        fields = _stat_fields(self._proc / str(pid))
        return (_start_time(fields) == started
                and (name == "tritonserver" or fields[1] == str(self.server_pid)))


def _start_time(fields: list[str] | None) -> str | None:
    """The start time (field 22 of /proc/PID/stat, clock ticks after boot) of a running process; None once it ended
    or is a zombie."""
    return fields[19] if fields is not None and len(fields) >= 20 and fields[0] not in ("Z", "X") else None


def stat(name: str, pid: int) -> ProcStat:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return ProcStat(name, pid, rss_kb=int(fields["VmRSS"].split()[0]), num_threads=int(fields["Threads"]),
                    shmem_kb=int(fields.get("RssShmem", "0").split()[0]))


def snapshot(server_pid: int) -> dict[str, ProcStat]:
    return {name: stat(name, pid) for name, pid in sorted(server_processes(server_pid).items())}


def is_alive(pid: int) -> bool:
    """A running process, not a zombie waiting for its parent."""
    fields = _stat_fields(Path(f"/proc/{pid}"))
    return fields is not None and fields[0] != "Z"


def _parent(proc_dir: Path) -> int | None:
    fields = _stat_fields(proc_dir)
    try:
        return None if fields is None else int(fields[1])
    except (IndexError, ValueError):
        return None


def _stat_fields(proc_dir: Path) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, parent, …), or None once the process ended."""
    try:
        # the command name may hold spaces or parentheses: the fields after the last ')' are fixed
        return (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _stub_model(proc_dir: Path) -> str | None:
    """The model name of a stub process (from its `<repository>/<model>/1/model.py` argument)."""
    try:
        argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not argv or not argv[0].endswith(STUB.encode()) or len(argv) < 2:
        return None
    return os.path.basename(os.path.dirname(os.path.dirname(argv[1].decode())))


def gpu_memory_used_mib() -> int | None:
    """The GPU memory in use on the first GPU (nvidia-smi), or None without one."""
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                 "-i", "0"], capture_output=True, text=True, timeout=20, check=True)
        return int(result.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def watch(server_pid: int, every_s: float, out, until=lambda: False) -> None:
    """A CSV line per `every_s` (elapsed s, GPU MiB, then each process's RSS in kB) while the server lives
    and `until()` is false; the columns are the processes seen at the first sample."""
    started = time.monotonic()
    names = sorted(server_processes(server_pid))
    print(",".join(["elapsed_s", "gpu_mib", *(f"{n}_rss_kb" for n in names)]), file=out, flush=True)
    while not until():
        try:
            pids = server_processes(server_pid)
            row = [f"{time.monotonic() - started:.0f}", str(gpu_memory_used_mib() or "")]
            row += [str(stat(n, pids[n]).rss_kb) if n in pids else "" for n in names]
        except OSError:
            return  # the server is gone
        print(",".join(row), file=out, flush=True)
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="sample a tritonserver's and its stubs' RSS and the GPU's "
                                                 "memory as CSV until the server ends (or --until-file exists)")
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--until-file", type=Path, default=None, help="stop once this file exists")
    args = parser.parse_args(argv)
    watch(args.server_pid, args.every, sys.stdout,
          until=lambda: args.until_file is not None and args.until_file.exists())
    return 0


if __name__ == "__main__":
    sys.exit(main())
