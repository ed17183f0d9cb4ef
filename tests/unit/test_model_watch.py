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


def fake_server(monkeypatch, running: dict, ready: set) -> list[str]:
    """Stub processes `running`, models Triton calls ready `ready`; returns the repository calls made."""
    calls = []
    monkeypatch.setattr(model_watch, "server_processes", lambda pid: {"tritonserver": pid, **running})
    monkeypatch.setattr(model_watch, "is_alive", lambda pid: True)
    monkeypatch.setattr(ModelWatch, "_is_ready", lambda self, model: model in ready)

    def post(self, path):
        calls.append(path)
        model, action = path.split("/")[-2:]
        (ready.discard if action == "unload" else ready.add)(model)
        if action == "load":
            running[model] = 99
    monkeypatch.setattr(ModelWatch, "_post", post)
    monkeypatch.setattr(model_watch, "ROUTER_HOLD_S", 0.0)
    return calls


def run_briefly(watch: ModelWatch, seconds: float = 0.3) -> None:
    watch.start()
    time.sleep(seconds)
    watch.stop()


def test_a_dead_stub_of_a_ready_model_is_unloaded_then_loaded(monkeypatch):
    running = {"voice_registry": 2, "voice_encoder": 3}  # the router's stub is gone
    calls = fake_server(monkeypatch, running, {"vox_ensemble", "voice_registry", "voice_encoder"})
    watch = ModelWatch("http://x", 1, period_s=0.01)
    run_briefly(watch)
    assert calls == ["/v2/repository/models/vox_ensemble/unload", "/v2/repository/models/vox_ensemble/load"]
    # the watch's thread counts the restart just after the load call returns: a stopped watch may still be there
    assert wait_for(lambda: watch.restarts["vox_ensemble"] == 1, timeout_s=2.0), watch.restarts
    assert watch.restarts == {"vox_ensemble": 1, "voice_registry": 0, "voice_encoder": 0}


def test_a_model_that_is_not_ready_is_left_alone(monkeypatch):
    """Being reloaded by the router, or unloaded by an operator: not the watch's to touch."""
    calls = fake_server(monkeypatch, {}, set())
    run_briefly(ModelWatch("http://x", 1, period_s=0.01))
    assert calls == []


def test_the_encoder_is_left_to_the_router_for_its_grace(monkeypatch):
    calls = fake_server(monkeypatch, {"vox_ensemble": 1, "voice_registry": 2}, {"voice_encoder"})
    watch = ModelWatch("http://x", 1, period_s=0.01, models={"voice_encoder": 0.5})
    run_briefly(watch, 0.2)
    assert calls == []
    run_briefly(ModelWatch("http://x", 1, period_s=0.01, models={"voice_encoder": 0.1}), 0.4)
    assert calls == ["/v2/repository/models/voice_encoder/unload", "/v2/repository/models/voice_encoder/load"]


def test_the_watch_ends_with_its_server(monkeypatch):
    """After its tritonserver exited, a new server on the same ports is not this watch's to heal."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert not model_watch.is_alive(process.pid) and model_watch.is_alive(os.getpid())
    calls = []
    monkeypatch.setattr(ModelWatch, "_post", lambda self, path: calls.append(path))
    watch = ModelWatch("http://x", process.pid, period_s=0.01).start()
    watch._thread.join(2)
    assert not watch._thread.is_alive() and calls == []


def test_a_load_that_failed_is_tried_again_until_it_holds(monkeypatch):
    """After its unload the model is not ready, which the watch otherwise leaves alone: a failed load (the
    stub did not start, the server was busy) must not leave the router unloaded for good."""
    running = {"voice_registry": 2, "voice_encoder": 3}
    calls = fake_server(monkeypatch, running, {"vox_ensemble", "voice_registry", "voice_encoder"})
    loading = ModelWatch._post
    failures = [OSError("load failed"), OSError("load failed")]

    def flaky(self, path):
        if path.endswith("/load") and failures:
            calls.append(path)
            raise failures.pop()
        loading(self, path)
    monkeypatch.setattr(ModelWatch, "_post", flaky)
    watch = ModelWatch("http://x", 1, period_s=0.01)
    run_briefly(watch)
    assert calls == ["/v2/repository/models/vox_ensemble/unload"] + ["/v2/repository/models/vox_ensemble/load"] * 3, calls
    assert watch.restarts["vox_ensemble"] == 1 and "vox_ensemble" in running


def test_a_load_that_keeps_failing_is_tried_again_less_and_less_often(monkeypatch):
    """Each failed load doubles the wait before the next (from the watch's period): a server that cannot load the
    model is not asked every period for ever."""
    running = {"voice_registry": 2, "voice_encoder": 3}
    calls = fake_server(monkeypatch, running, {"vox_ensemble", "voice_registry", "voice_encoder"})
    tries: list[float] = []
    unloading = ModelWatch._post

    def failing(self, path):
        if path.endswith("/load"):
            tries.append(time.monotonic())
            raise OSError("load failed")
        unloading(self, path)
    monkeypatch.setattr(ModelWatch, "_post", failing)
    watch = ModelWatch("http://x", 1, period_s=0.01)
    run_briefly(watch, 0.6)
    gaps = [later - earlier for earlier, later in zip(tries, tries[1:])]
    assert 3 <= len(tries) <= 8, tries  # every period for 0.6 s would be about 60
    assert all(gap >= 0.01 * 2 ** i for i, gap in enumerate(gaps)), gaps
    assert watch.restarts["vox_ensemble"] == 0 and "vox_ensemble" not in running
