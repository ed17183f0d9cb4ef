"""A process's /proc/PID/stat, read once for the stubs that look at their siblings and their server.

The second field, the command name in parentheses, may hold spaces and parentheses itself, so the fields are
counted from the last ")": `stat_fields(pid)[0]` is field 3 of proc(5) (the state), `[1]` the parent pid, `[19]`
the start time in clock ticks since boot.
"""
from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")
STATE, PARENT_PID, START_TICKS = 0, 1, 19  # indexes into `stat_fields`: proc(5) fields 3, 4 and 22


def stat_fields(pid: int | str, proc: Path = PROC) -> list[bytes]:
    """The fields after "(comm)" of the process's stat; empty where it cannot be read (the process went away)."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return []
    return stat.rsplit(b")", 1)[-1].split()
