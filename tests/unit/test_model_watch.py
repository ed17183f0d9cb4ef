"""The watch that ends a server whose router died (server/model_watch.py), without a server: when it ends it, what
it leaves alone, and that it ends with its server."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from server import model_watch
from server.model_watch import ModelWatch
from tests.waiting import wait_for


class FakeWatch(ModelWatch):
    """A watch of a fake server: stub processes `running`, the models Triton calls ready `ready`; `ended` counts
    the calls to end the server. Only this instance sees the fake (the module's functions are left alone: a server
    another test keeps running in this process has its own watch, which must not see it)."""

    def __init__(self, running: dict, ready: set) -> None:
        self.ended: list[int] = []
        super().__init__("http://x", 1, lambda: self.ended.append(1), period_s=0.01)
        self.running, self.ready = running, ready

    def _server_is_alive(self) -> bool:
        return True

    def _stubs(self) -> dict[str, int]:
        return {"tritonserver": 1, **self.running}

    def _is_ready(self, model: str) -> bool:
        return model in self.ready


def run_briefly(watch: ModelWatch, seconds: float = 0.3) -> None:
    """For what must not happen: the watch runs `seconds` (30 of its periods) and stops."""
    watch.start()
    time.sleep(seconds)
    watch.stop()


def test_a_dead_router_ends_its_server_once():
    watch = FakeWatch({"voice_registry": 2}, {"vox_ensemble", "voice_registry"})  # the router's stub is gone
    watch.start()
    assert wait_for(lambda: watch.ended == [1], timeout_s=10)
    watch._thread.join(2)
    assert not watch._thread.is_alive() and watch.ended == [1] and watch.num_router_deaths == 1


def test_a_live_router_or_one_that_is_not_ready_is_left_alone():
    """A router being reloaded, or unloaded by an operator, is not ready: not the watch's to touch."""
    for running, ready in (({"vox_ensemble": 3}, {"vox_ensemble"}), ({}, set())):
        watch = FakeWatch(running, ready)
        run_briefly(watch)
        assert watch.ended == []


def test_the_watch_ends_with_its_server():
    """After its tritonserver exited, a new server on the same ports is not this watch's to end."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not model_watch.is_alive(process.pid) and model_watch.is_alive(os.getpid())
    ended = []
    watch = ModelWatch("http://x", process.pid, lambda: ended.append(1), period_s=0.01).start()
    watch._thread.join(2)
    assert not watch._thread.is_alive() and ended == []
