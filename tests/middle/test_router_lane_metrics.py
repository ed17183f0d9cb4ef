"""The router's lane metrics in-process: chunks counted by routed lane and reason, each chunk's slack
when sent, and each codec call split into queueing and the lane's own run time."""
from __future__ import annotations

import threading
import time

import pytest

from tests.middle.conftest import chunk
from tests.middle.test_router_relay import outcome
from tests.waiting import wait_for as wait_until


def family(lanes, name: str):
    return next(f for f in lanes.router.metrics._families if f.name == name)


def routed(lanes) -> dict[tuple[str, str], float]:
    return {(m.labels["lane"], m.labels["reason"]): m.value
            for m in family(lanes, "voxlane_chunks_routed_total").metrics if m.value}


def by_lane(lanes, name: str) -> dict[str, list[float]]:
    return {m.labels["lane"]: m.observations for m in family(lanes, name).metrics}


def speak_chunks(lanes, num_chunks: int) -> None:
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    for i in range(num_chunks):
        seq.sink.emit(chunk(i, new_frames=8))
    lanes.engine.finish(seq.request_id, None)
    _, ended = outcome(request)
    assert ended is None


def test_each_chunk_is_counted_by_its_lane_and_routing_reason(lanes):
    """Chunk 0 is urgent as the first chunk; the LM's chunks all come at once, so the later ones have
    8 frames (0.67 s) of audio ahead each and go to the background lane with slack to spare."""
    speak_chunks(lanes, 4)
    assert routed(lanes) == {("urgent", "first_chunk"): 1, ("background", "slack_ok"): 3}
    slack = family(lanes, "voxlane_chunk_slack_ms").metrics[0].observations
    assert len(slack) == 3 and all(s > 0 for s in slack)  # chunk 0 has no slack: its send starts playback


@pytest.mark.parametrize("lanes", ["partition"], indirect=True)
def test_a_single_lane_mode_counts_its_chunks_under_the_mode_reason(lanes):
    speak_chunks(lanes, 2)
    assert routed(lanes) == {("background", "mode"): 2}


def test_a_codec_call_is_split_into_the_lanes_run_time_and_the_rest(lanes):
    lanes.codecs["codec_urgent"].run_ms = 40.0  # more than the call takes in-process: the queue is 0
    lanes.codecs["codec"].run_ms = 0.0
    speak_chunks(lanes, 2)
    run, queue, call = (by_lane(lanes, name) for name in
                        ("voxlane_codec_run_ms", "voxlane_codec_queue_ms", "voxlane_codec_ms"))
    assert run["urgent"] == [40.0] and queue["urgent"] == [0.0]
    assert run["background"] == [0.0] and queue["background"] == pytest.approx(call["background"])


@pytest.mark.parametrize("lanes", [{"mode": "voxlane", "urgent_budget": "1"}], indirect=True)
def test_a_late_chunk_that_finds_the_urgent_budget_used_up_goes_to_the_background_lane(lanes):
    """Stream A's first chunk holds the urgent lane (a budget of 1); stream B's first chunk still goes
    urgent, and its late second chunk (emitted after its first one's 0.16 s have played) goes background."""
    urgent, held, release = lanes.codecs["codec_urgent"], threading.Event(), threading.Event()
    decode = urgent.__call__

    def hold_the_first_call(request, decoupled):
        if not held.is_set():
            held.set()
            release.wait(5.0)
        return decode(request, decoupled)
    lanes.pb.SERVER.handlers["codec_urgent"] = hold_the_first_call
    first = lanes.speak()
    lanes.engine.next_sequence().sink.emit(chunk(0))
    assert held.wait(5.0)
    second = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))  # 2 frames: 0.16 s of audio
    assert wait_until(lambda: urgent.calls == 1)  # B's first chunk decoded; A's is still held
    time.sleep(0.25)  # chunk 1's deadline has passed
    seq.sink.emit(chunk(1, new_frames=8, is_last=True))
    lanes.engine.finish(seq.request_id, None)
    chunks, ended = outcome(second)
    release.set()
    assert ended is None and [lane for _, lane, _ in chunks] == ["urgent", "background"]
    assert routed(lanes)[("background", "urgent_full")] == 1
    first_seq_id = next(iter(lanes.engine._live))
    lanes.engine.finish(first_seq_id, None)
    assert outcome(first)[1] is None
