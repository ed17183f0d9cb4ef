"""The router's guards without a server: request parameters, the cancel watch, lane health, the fault hook."""
from __future__ import annotations

import threading
import time

import pytest

from backend_python.stub_common import fault_inject
from backend_python.vox_ensemble.cancel_watch import CancelWatch
from backend_python.stub_common.lane_health import HealPolicy, LaneHealth, ModelControl
from backend_python.stub_common.request_inputs import RequestError, check_request_parameters
from protocol.reasons import Ended, EndReason
from tests.waiting import wait_for


def test_request_parameters_are_refused_by_name():
    check_request_parameters("{}")
    check_request_parameters("")
    with pytest.raises(RequestError, match="unknown request parameter 'speed'.*max_audio_seconds"):
        check_request_parameters('{"speed": 2, "volume": 1}')


def test_cancel_watch_reports_each_cancelled_stream_once():
    cancelled = {"a": False, "b": False}
    seen: list[str] = []
    watch = CancelWatch(seen.append, period_s=0.01)
    watch.add("a", lambda: cancelled["a"])
    watch.add("b", lambda: cancelled["b"])
    watch.start()
    try:
        cancelled["b"] = True
        deadline = time.monotonic() + 2
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # more polls: b must not be reported twice
        assert seen == ["b"] and watch.num_watched == 1
        watch.remove("a")
        assert watch.num_watched == 0
    finally:
        watch.stop()


def test_cancel_watch_survives_a_failing_cancel():
    calls: list[str] = []

    def on_cancel(stream_id: str) -> None:
        calls.append(stream_id)
        if stream_id == "bad":
            raise RuntimeError("LM gone")

    watch = CancelWatch(on_cancel, period_s=0.01)
    watch.add("bad", lambda: True)
    watch.start()
    try:
        time.sleep(0.05)
        watch.add("good", lambda: True)
        deadline = time.monotonic() + 2
        while "good" not in calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == ["bad", "good"]
    finally:
        watch.stop()


class FakeControl:
    """Model control of a server whose loads fail `failing_loads` times, then start a live stub."""

    def __init__(self, failing_loads: int = 0, can_unload: bool = True) -> None:
        self.ready = {"codec": True, "codec_urgent": True}
        self.calls: list[tuple[str, str]] = []
        self.failing_loads, self.can_unload = failing_loads, can_unload
        self.is_stub_alive = {"codec": True, "codec_urgent": True}

    def unload(self, model: str) -> None:
        if not self.can_unload:
            raise RuntimeError("explicit model load / unload is not allowed")
        self.calls.append(("unload", model))
        self.ready[model] = False

    def load(self, model: str) -> None:
        self.calls.append(("load", model))
        if self.failing_loads > 0:
            self.failing_loads -= 1
            raise RuntimeError("load failed")
        self.ready[model], self.is_stub_alive[model] = True, True

    def control(self) -> ModelControl:
        return ModelControl(self.unload, self.load, lambda m: self.ready[m], lambda m: self.is_stub_alive[m])


FAST = HealPolicy(reload_attempts=3, first_delay_s=0.01, unload_wait_s=1.0, poll_s=0.01)


def test_a_dead_stub_is_reloaded_once_per_death_and_serves_again():
    fake, changes = FakeControl(failing_loads=1), []
    health = LaneHealth(fake.control(), FAST, lambda *change: changes.append(change))
    assert health.unavailable("codec") is None
    fake.is_stub_alive["codec"] = False
    ended = health.on_dead("codec", "Stub process 'codec_0_0' is not healthy.")
    assert ended.reason is EndReason.LANE_DOWN and "codec failed" in ended.message and "process died" in ended.message
    health.on_dead("codec", "Stub process 'codec_0_0' is not healthy.")  # a second stream, same crash
    assert health.unavailable("codec_urgent") is None
    assert wait_for(lambda: health.unavailable("codec") is None)
    assert fake.calls == [("unload", "codec"), ("load", "codec"), ("unload", "codec"), ("load", "codec")]
    assert changes == [("codec", False, False), ("codec", True, True)]


def reloaded_once(model: str) -> tuple[FakeControl, LaneHealth, list, int]:
    """A lane whose stub died and was reloaded: (its control, its health, the changes seen, the generation before)."""
    fake, changes = FakeControl(), []
    health = LaneHealth(fake.control(), FAST, lambda *change: changes.append(change))
    before = health.generation(model)
    fake.is_stub_alive[model] = False
    health.on_dead(model, f"Stub process '{model}_0_0' is not healthy.", before)
    assert wait_for(lambda: health.unavailable(model) is None)
    return fake, health, changes, before


def test_a_call_to_the_process_that_died_fails_late_and_the_reloaded_lane_stays_in_service():
    """A call made before the lane came back reached the dead stub; its error may come after the reload (Triton
    answered one 'not healthy' after the new stub had loaded): it ends its stream, and reloads nothing again."""
    fake, health, changes, before = reloaded_once("codec_urgent")
    late = health.on_dead("codec_urgent", "Stub process 'codec_urgent_0_0' is not healthy.", before)
    assert late.reason is EndReason.LANE_DOWN and "reloaded since" in late.message
    assert health.unavailable("codec_urgent") is None and health.generation("codec_urgent") == before + 1
    assert fake.calls == [("unload", "codec_urgent"), ("load", "codec_urgent")]
    assert changes == [("codec_urgent", False, False), ("codec_urgent", True, True)]
    health.on_dead("codec_urgent", "Stub process 'codec_urgent_0_0' is not healthy.", before + 1)  # the new one
    assert health.unavailable("codec_urgent") is not None  # died too: down, and reloaded again


def test_reloading_gives_up_after_its_attempts_and_then_notices_an_operators_load():
    fake = FakeControl(failing_loads=99)
    health = LaneHealth(fake.control(), FAST)
    health.on_dead("codec", "dead")
    assert wait_for(lambda: "reloading it failed" in health.unavailable("codec").message)
    assert fake.calls.count(("load", "codec")) == 3
    assert "POST /v2/repository/models/codec/load" in health.unavailable("codec").message
    fake.ready["codec"] = True  # an operator loaded it again
    assert wait_for(lambda: health.unavailable("codec") is None)


def test_an_unloaded_lane_is_refused_until_it_shows_ready_and_a_late_refusal_from_before_a_reload_is_ignored():
    """Triton refused a call as "unknown model": the lane is down with that reason, no reload, until readiness
    shows it loaded; a refusal of a call made before the lane last came back (during its reload) says nothing."""
    fake, health, changes, before = reloaded_once("codec")
    refused = Ended(EndReason.LANE_DOWN, "the server is shutting down, or codec is unloaded: unknown model")
    health.on_unloaded("codec", refused, before)  # a call into the reload's unload, answered after it
    assert health.unavailable("codec") is None
    fake.ready["codec"] = False  # an operator unloaded it
    health.on_unloaded("codec", refused, health.generation("codec"))
    assert health.unavailable("codec") is refused and changes[-1] == ("codec", False, False)
    time.sleep(1.2)  # past the operator check: still not ready, still down
    assert health.unavailable("codec") is refused
    fake.ready["codec"] = True  # loaded again
    assert wait_for(lambda: health.unavailable("codec") is None)
    assert fake.calls == [("unload", "codec"), ("load", "codec")]  # the death's reload only
    assert changes[-1] == ("codec", True, False)


def test_a_lane_that_cannot_be_unloaded_stays_down():
    fake = FakeControl(can_unload=False)  # the dead model still looks ready
    health = LaneHealth(fake.control(), FAST)
    health.on_dead("codec_urgent", "Stub process 'codec_urgent_0_0' is not healthy.")
    assert wait_for(lambda: "cannot be unloaded" in health.unavailable("codec_urgent").message)
    time.sleep(1.2)  # past the operator check: a ready dead model must not count as reloaded
    down = health.unavailable("codec_urgent")
    assert down.reason is EndReason.LANE_DOWN and fake.calls == []


def test_fault_hook_is_off_unless_the_environment_turns_it_on(monkeypatch):
    monkeypatch.delenv(fault_inject.ENV, raising=False)
    marker = fault_inject.marker_from_env()
    assert marker is None
    assert fault_inject.codec_parameters(marker, "FAULT here") == {}
    assert not fault_inject.is_tagged(marker, '{"voxlane_fault_inject": true}')  # a tag from outside
    monkeypatch.setenv(fault_inject.ENV, "FAULT")
    marker = fault_inject.marker_from_env()
    assert fault_inject.codec_parameters(marker, "plain text") == {}
    tag = fault_inject.codec_parameters(marker, "a FAULT here")
    assert fault_inject.is_tagged(marker, '{"voxlane_fault_inject": true}') and tag


def test_a_removed_stream_is_never_polled_again():
    """Polling a sender after its final response crashed tritonserver: remove() must fence the poll."""
    polling = threading.Event()
    release = threading.Event()
    polls_after_remove: list[bool] = []
    removed = threading.Event()

    def is_cancelled() -> bool:
        if removed.is_set():
            polls_after_remove.append(True)
        polling.set()
        release.wait(1)
        return False

    watch = CancelWatch(lambda stream_id: None, period_s=0.01)
    watch.add("s", is_cancelled)
    watch.start()
    try:
        assert polling.wait(2)  # a poll is in progress now
        remover = threading.Thread(target=lambda: (watch.remove("s"), removed.set()))
        remover.start()
        time.sleep(0.05)
        assert not removed.is_set()  # remove waits for the poll in progress
        release.set()
        remover.join(2)
        time.sleep(0.05)
        assert removed.is_set() and polls_after_remove == []
    finally:
        watch.stop()
