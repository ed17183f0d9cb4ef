"""/proc/PID/stat read past a command name that holds spaces and parentheses."""
from __future__ import annotations

import os

from backend_python.stub_common.procfs import PARENT_PID, START_TICKS, STATE, stat_fields


def test_the_fields_count_from_the_last_parenthesis(tmp_path):
    (tmp_path / "7").mkdir()
    ticks = " ".join(str(n) for n in range(5, 22))  # proc(5) fields 5..21, then the start time
    (tmp_path / "7" / "stat").write_bytes(f"7 (a) b (c) S 3 {ticks} 4242 0".encode())
    fields = stat_fields(7, tmp_path)
    assert (fields[STATE], fields[PARENT_PID], fields[START_TICKS]) == (b"S", b"3", b"4242")


def test_a_process_gone_has_no_fields(tmp_path):
    assert stat_fields(99, tmp_path) == []


def test_this_process_reads_as_itself():
    fields = stat_fields(os.getpid())
    assert fields[STATE] in (b"R", b"S") and int(fields[PARENT_PID]) == os.getppid()
