"""The watch that heals the router, the registry and an idle encoder (clients/model_watch.py), without a server:
which model it reloads and how, what it leaves alone, and that it ends with its server."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from clients import model_watch
from clients.model_watch import ModelWatch
from tests.waiting import wait_for


class FakeWatch(ModelWatch):
    """A watch of a fake server: stub processes `running`, the models Triton calls ready `ready`; `calls` holds
    the repository calls made. Only this instance sees the fake (the module's functions are left alone: a
    server another test keeps running in this process has its own watch, which must not see it)."""

    def __init__(self, running: dict, ready: set, calls: list[str], **settings) -> None:
        super().__init__("http://x", 1, router_hold_s=0.0, **{"period_s": 0.01, **settings})
        self.running, self.ready, self.calls = running, ready, calls

    def _server_is_alive(self) -> bool:
        return True

    def _stubs(self) -> dict[str, int]:
        return {"tritonserver": 1, **self.running}

    def _is_ready(self, model: str) -> bool:
        return model in self.ready

    def _post(self, path: str) -> None:
        self.calls.append(path)
        model, action = path.split("/")[-2:]
        (self.ready.discard if action == "unload" else self.ready.add)(model)
        if action == "load":
            self.running[model] = 99


def run_briefly(watch: ModelWatch, seconds: float = 0.3) -> None:
    """For what must not happen: the watch runs `seconds` (30 of its periods) and stops."""
    watch.start()
    time.sleep(seconds)
    watch.stop()


def run_until(watch: ModelWatch, condition, timeout_s: float = 10.0) -> None:
    """For what must happen: the watch runs until `condition` holds (a slow machine only takes longer)."""
    watch.start()
    try:
        assert wait_for(condition, timeout_s=timeout_s), (watch.calls, watch.restarts)
    finally:
        watch.stop()


ROUTER_READY = {"vox_ensemble", "voice_registry", "voice_encoder"}
UNLOAD, LOAD = "/v2/repository/models/vox_ensemble/unload", "/v2/repository/models/vox_ensemble/load"


def test_a_dead_stub_of_a_ready_model_is_unloaded_then_loaded():
    running = {"voice_registry": 2, "voice_encoder": 3}  # the router's stub is gone
    watch = FakeWatch(running, set(ROUTER_READY), [])
    run_until(watch, lambda: watch.restarts["vox_ensemble"] == 1)
    assert watch.calls == [UNLOAD, LOAD]
    assert watch.restarts == {"vox_ensemble": 1, "voice_registry": 0, "voice_encoder": 0}


def test_a_model_that_is_not_ready_is_left_alone():
    """Being reloaded by the router, or unloaded by an operator: not the watch's to touch."""
    watch = FakeWatch({}, set(), [])
    run_briefly(watch)
    assert watch.calls == []


def test_the_encoder_is_left_to_the_router_for_its_grace():
    calls: list[str] = []
    run_briefly(FakeWatch({"vox_ensemble": 1, "voice_registry": 2}, {"voice_encoder"}, calls,
                          models={"voice_encoder": 5.0}))
    assert calls == []
    watch = FakeWatch({"vox_ensemble": 1, "voice_registry": 2}, {"voice_encoder"}, calls,
                      models={"voice_encoder": 0.1})
    run_until(watch, lambda: watch.restarts["voice_encoder"] == 1)
    assert calls == ["/v2/repository/models/voice_encoder/unload", "/v2/repository/models/voice_encoder/load"]


def test_the_watch_ends_with_its_server(monkeypatch):
    """After its tritonserver exited, a new server on the same ports is not this watch's to heal."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not model_watch.is_alive(process.pid) and model_watch.is_alive(os.getpid())
    calls = []

    class Watch(ModelWatch):
        def _post(self, path):
            calls.append(path)
    watch = Watch("http://x", process.pid, period_s=0.01).start()
    watch._thread.join(2)
    assert not watch._thread.is_alive() and calls == []


class FailingLoads(FakeWatch):
    """Its first `failures` loads fail (`None`: every one); each try's time is kept."""

    def __init__(self, *args, failures: int | None, **settings) -> None:
        super().__init__(*args, **settings)
        self.failures, self.tries = failures, []

    def _post(self, path: str) -> None:
        if path.endswith("/load"):
            self.tries.append(time.monotonic())
            if self.failures is None or len(self.tries) <= self.failures:
                self.calls.append(path)
                raise OSError("load failed")
        super()._post(path)


def test_a_load_that_failed_is_tried_again_until_it_holds():
    """After its unload the model is not ready, which the watch otherwise leaves alone: a failed load (the
    stub did not start, the server was busy) must not leave the router unloaded for good."""
    running = {"voice_registry": 2, "voice_encoder": 3}
    watch = FailingLoads(running, set(ROUTER_READY), [], failures=2)
    run_until(watch, lambda: watch.restarts["vox_ensemble"] == 1)
    assert watch.calls == [UNLOAD] + [LOAD] * 3, watch.calls
    assert "vox_ensemble" in running


def test_a_load_that_keeps_failing_is_tried_again_less_and_less_often():
    """Each failed load doubles the wait before the next (from the watch's period): a server that cannot load the
    model is not asked every period for ever."""
    running = {"voice_registry": 2, "voice_encoder": 3}
    watch = FailingLoads(running, set(ROUTER_READY), [], failures=None)
    run_until(watch, lambda: len(watch.tries) >= 5)
    gaps = [later - earlier for earlier, later in zip(watch.tries, watch.tries[1:])]
    assert all(gap >= 0.01 * 2 ** i for i, gap in enumerate(gaps)), gaps  # every period would be 0.01 s apart
    assert watch.restarts["vox_ensemble"] == 0 and "vox_ensemble" not in running
    assert watch.calls.count(UNLOAD) == 1  # the watch does not unload a model it still owes a load
