"""A tritonserver that a signal ends before it is ready is started again; one that exits with a code is not
(server/serve.py START_ATTEMPTS). A stop ends the live streams before its SIGTERM (`Server._drain`).
tritonserver and the model watch are stand-ins here: the end-to-end tests start the real ones (test_faults.py stops
one with streams in flight)."""
from __future__ import annotations

import signal

import pytest

from server import serve
from server.serve import START_ATTEMPTS, ServeConfig, Server
from server.triton_launch import Ports
from clients.voices import RegistryError
from protocol.reasons import Ended, EndReason


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
    UNLOAD_WORKS = True
    unloaded: list = []

    def __init__(self, *args):
        pass

    @staticmethod
    def call_registry(url, action, key, timeout_s, name):
        """The server's model control through voice_registry (the drain's unload of the LM)."""
        assert action == "unload_model" and key
        FakeWatch.unloaded.append(name)
        if not FakeWatch.UNLOAD_WORKS:
            raise RegistryError(Ended(EndReason.LANE_DOWN, "refused"))
        return {"object": "model", "name": name, "ready": False}

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
    monkeypatch.setattr(serve, "call_registry", FakeWatch.call_registry)
    FakeTriton.started, FakeWatch.unloaded, FakeWatch.UNLOAD_WORKS = [], [], True
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


def test_a_server_whose_tritonserver_died_serves_on_until_stopped(server, monkeypatch):
    """A tritonserver that exits is its keeper's to start again: the server serves on, also in the moment before
    the keeper has seen the exit (`voxlane serve` read that moment as the end and quit); a stop ends it."""
    monkeypatch.setattr(serve, "REVIVE_PERIOD_S", 30.0)  # the keeper does not look again within this test
    assert not server.is_serving()  # not started
    FakeTriton.ENDS = [None]
    server.start(timeout_s=5)
    assert server.is_serving()
    server.process.process.returncode = -signal.SIGKILL
    assert server.is_serving() and not server.is_reviving
    server.stop(grace_s=0)
    assert not server.is_serving()


@pytest.mark.parametrize("live, unload_works, unloads, is_drained, live_left", [
    ([0], True, [], True, 0),  # idle: nothing to end, nothing unloaded before the SIGTERM
    ([8, 8, 3, 0], True, ["speechlm_lm"], True, 0),  # the LM's unload ends the streams; the router passes them on
    ([8], False, ["speechlm_lm"], False, 8),  # the unload is refused: straight to the SIGTERM
    ([8, 8, 5] + [2] * 1000, True, ["speechlm_lm"], False, 2),  # streams outlive the drain's bound: it says how many
    ([8, None], True, ["speechlm_lm"], False, None),  # the metrics stop answering
])
def test_a_stop_ends_the_live_streams_before_its_sigterm(server, monkeypatch, live, unload_works, unloads, is_drained,
                                                          live_left):
    FakeTriton.ENDS = [None]
    server.start(timeout_s=5)
    FakeWatch.UNLOAD_WORKS = unload_works
    readings = iter(live)
    monkeypatch.setattr(server, "_live_requests", lambda: next(readings, live[-1]))
    monkeypatch.setattr(serve, "DRAIN_S", 0.2)
    process = server.process
    server.stop(grace_s=20)
    assert process.stopped and FakeWatch.unloaded == unloads
    assert server.last_stop.is_drained is is_drained and server.last_stop.drain_s < 1.0
    assert server.last_stop.live_left == live_left
