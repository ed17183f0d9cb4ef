"""The router's guards without a server: request parameters, the cancel watch, lane health, the fault hook."""
from __future__ import annotations

import threading
import time

import pytest

from backend_python.triton import fault_inject
from backend_python.router.cancel_watch import CancelWatch
from backend_python.router.lane_health import LaneHealth
from backend_python.triton.request_inputs import RequestError, check_request_parameters
from protocol.reasons import EndReason


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


def test_a_dead_stub_is_unloaded_once_and_serves_again_when_loaded():
    unloads: list[str] = []
    ready = {"codec": True}

    def unload(model: str) -> None:
        unloads.append(model)
        ready[model] = False

    health = LaneHealth(unload=unload, is_ready=lambda m: ready[m])
    assert health.unavailable("codec") is None and unloads == []
    ended = health.on_dead("codec", "Stub process 'codec_0_0' is not healthy.")
    assert ended.reason is EndReason.LANE_DOWN and "codec failed" in ended.message and "process died" in ended.message
    health.on_dead("codec", "Stub process 'codec_0_0' is not healthy.")  # a second stream, same crash
    assert unloads == ["codec"]
    down = health.unavailable("codec")
    assert down.reason is EndReason.LANE_DOWN and "POST /v2/repository/models/codec/load" in down.message
    assert health.unavailable("codec_urgent") is None
    ready["codec"] = True  # an operator loaded it again
    assert health.unavailable("codec") is None


def test_a_lane_that_cannot_be_unloaded_stays_down():
    def unload(model: str) -> None:
        raise RuntimeError("explicit model load / unload is not allowed")

    health = LaneHealth(unload=unload, is_ready=lambda m: True)  # the dead model still looks ready
    health.on_dead("codec_urgent", "Stub process 'codec_urgent_0_0' is not healthy.")
    down = health.unavailable("codec_urgent")
    assert down.reason is EndReason.LANE_DOWN and "down" in down.message


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
