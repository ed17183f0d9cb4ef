"""Unload marks belong to one tritonserver: a later server given the same pid does not read an earlier one's."""
from __future__ import annotations

import os

from backend_python.stub_common import unloads


def test_a_mark_is_read_once_by_its_own_server(tmp_path, monkeypatch):
    monkeypatch.setattr(unloads.tempfile, "gettempdir", lambda: str(tmp_path))
    unloads.mark_unloaded(pid=201, server_pid=os.getpid())
    assert unloads.was_unloaded(201, os.getpid())
    assert not unloads.was_unloaded(201, os.getpid())  # the watch took it


def test_a_killed_servers_mark_is_not_read_by_a_later_server_with_its_pid(tmp_path, monkeypatch):
    monkeypatch.setattr(unloads.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(unloads, "_start_ticks", lambda pid: "1000")
    unloads.mark_unloaded(pid=201, server_pid=300)  # then the server was killed: its marks stay behind
    monkeypatch.setattr(unloads, "_start_ticks", lambda pid: "2000")  # another server, given pid 300 again
    assert not unloads.was_unloaded(201, 300)  # its stub 201's exit is a death


def test_the_start_ticks_are_the_process_s_own():
    assert unloads._start_ticks(os.getpid()) == unloads._start_ticks(os.getpid()) != "0"
    assert unloads._start_ticks(os.getpid()) != unloads._start_ticks(1)


def test_a_stopped_servers_marks_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(unloads.tempfile, "gettempdir", lambda: str(tmp_path))
    unloads.mark_unloaded(pid=201, server_pid=os.getpid())
    unloads.mark_unloaded(pid=202, server_pid=os.getpid())
    unloads.remove_marks(unloads.folder(os.getpid()))
    assert list(tmp_path.iterdir()) == []
    unloads.remove_marks(unloads.folder(os.getpid()))  # none left: nothing to do


def test_a_stub_reports_a_crash_until_it_is_unloaded(tmp_path, monkeypatch):
    """A stub prints its Python stacks on a fatal signal (faulthandler), but not once it is being unloaded: Triton
    2.51's stubs often crash on their way out, which would print a "Fatal Python error" at every stop."""
    import faulthandler
    import logging

    from backend_python.stub_common.logs import LOGGER, configure_stub_logging
    monkeypatch.setattr(unloads.tempfile, "gettempdir", lambda: str(tmp_path))
    was_enabled, logger = faulthandler.is_enabled(), logging.getLogger(LOGGER)
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        faulthandler.disable()
        configure_stub_logging()
        assert faulthandler.is_enabled()
        unloads.mark_unloaded(pid=201, server_pid=os.getpid())  # another stub's mark: this one is not unloading
        assert faulthandler.is_enabled()
        unloads.mark_unloaded(server_pid=os.getpid())  # this stub's finalize
        assert not faulthandler.is_enabled()
    finally:
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)
        faulthandler.enable() if was_enabled else faulthandler.disable()
