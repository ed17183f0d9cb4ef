"""A tritonserver that a signal ends before it is ready is started again; one that exits with a code is not
(clients/serve.py START_ATTEMPTS). tritonserver and the model watch are stand-ins here: the end-to-end tests start
the real ones."""
from __future__ import annotations

import signal

import pytest

from clients import serve
from clients.serve import START_ATTEMPTS, ServeConfig, Server
from clients.triton_launch import Ports


class FakePopen:
    def __init__(self, code):
        self.returncode, self.pid = code, 4242

    def poll(self):
        return self.returncode


class FakeTriton:
    """Each start ends as the next of `ENDS` says: a negative code (a signal), a code, or None (ready)."""
    ENDS: list = []
    started: list = []

    def __init__(self, binary, repository, ports, env, log_path, exposure, append_log):
        FakeTriton.started.append(append_log)
        self.process = FakePopen(None)
        self._end = FakeTriton.ENDS.pop(0)
        self.stopped = False

    def wait_ready(self, timeout_s):
        if self._end is not None:
            self.process.returncode = self._end
            raise RuntimeError(f"tritonserver exited with code {self._end} before ready")

    def stop(self, grace_s=20.0):
        self.stopped = True
        return self.process.returncode


class FakeWatch:
    def __init__(self, *args):
        pass

    def start(self):
        return self

    def stop(self):
        pass


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXLANE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(serve, "TritonProcess", FakeTriton)
    monkeypatch.setattr(serve, "find_triton", lambda: "tritonserver")
    monkeypatch.setattr(serve, "ModelWatch", FakeWatch)
    FakeTriton.started = []
    srv = Server(ServeConfig(ports=Ports(8000, 8001, 8002)), run_dir=tmp_path / "run", log_path=tmp_path / "t.log")
    yield srv
    srv.stop(grace_s=0)


def test_a_start_that_a_signal_ends_before_ready_is_made_again(server):
    FakeTriton.ENDS = [-signal.SIGABRT, None]
    server.start(timeout_s=5)
    assert FakeTriton.started == [False, True]  # the second start appends to the first one's log
    assert server.process.process.poll() is None


@pytest.mark.parametrize("code", [1, 0])
def test_a_start_that_exits_with_a_code_is_not_made_again(server, code):
    FakeTriton.ENDS = [code, None]
    with pytest.raises(RuntimeError, match=f"exited with code {code}"):
        server.start(timeout_s=5)
    assert FakeTriton.started == [False]


def test_the_starts_end_after_the_last_attempt(server):
    FakeTriton.ENDS = [-signal.SIGABRT] * START_ATTEMPTS + [None]
    with pytest.raises(RuntimeError, match="exited with code -6"):
        server.start(timeout_s=5)
    assert len(FakeTriton.started) == START_ATTEMPTS
