"""Routing counts a cascade's refinement, in-process (fake pb_utils, fake codec and refinement lanes, fake LM engine):
each refinement call is timed per lane as codec calls are (the estimate and the `voxlane_refiner_*` histograms); a
chunk's background slack must cover the background refinement lane's time as well as the codec's, so a slow
`refiner` sends a chunk urgent that the codec's time alone would leave in the background; and refinements in flight
on `refiner_urgent` count toward the urgent lane's budget until they end, answered or failed."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from protocol.reasons import EndReason
from scheduler import Lane
from tests.middle.test_router_lane_metrics import by_lane, family, routed
from tests.middle.test_router_refinement import (CASCADE, CONTEXT, NUM_OTHER, arrays_of, cascade,  # noqa: F401
                                                 cascade_chunk, emit_plan, stream_semantic)
from tests.middle.test_router_relay import outcome
from tests.waiting import wait_for

REFINE_DELAY_S = 0.3  # the background refiner's time in the routing test
# two chunks of 8 frames (0.64 s of audio each), no lookahead: each chunk's window needs a refinement call
TWO_CHUNKS = [(0, 8, 0, 0), (8, 8, 0, 0)]


def delay(cascade, model: str, seconds: float) -> None:
    """Make the refinement lane `model` take `seconds` longer for each call."""
    refine = cascade.refiners[model]

    def slow(request, decoupled):
        time.sleep(seconds)
        return refine(request, decoupled)
    cascade.pb.SERVER.handlers[model] = slow


def play(cascade, semantic: np.ndarray, plan=TWO_CHUNKS):
    """One stream whose LM sends every chunk of `plan` at once: its chunks' lanes, once it ended cleanly."""
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    emit_plan(seq, semantic, plan)
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None
    return [lane for _, lane, _ in chunks]


# 1. the refinement's time, measured per lane


def test_each_refinement_call_is_timed_per_lane_into_the_estimate_and_the_metrics(cascade):
    delay(cascade, "refiner", REFINE_DELAY_S)
    assert play(cascade, stream_semantic(16)) == ["urgent", "background"]
    estimator = cascade.router.refiners.estimator
    assert estimator.expected(Lane.BACKGROUND, 1) >= REFINE_DELAY_S  # one call: the estimate is that call
    assert estimator.expected(Lane.URGENT, 1) < REFINE_DELAY_S
    assert [(s.lane, s.batch_size, s.count) for s in estimator.snapshot()] == [(Lane.BACKGROUND, 1, 1),
                                                                              (Lane.URGENT, 1, 1)]
    calls, run, queue = (by_lane(cascade, name) for name in
                         ("voxlane_refiner_ms", "voxlane_refiner_run_ms", "voxlane_refiner_queue_ms"))
    assert len(calls["urgent"]) == 1 and len(calls["background"]) == 1
    assert calls["background"][0] >= REFINE_DELAY_S * 1e3 and calls["urgent"][0] < REFINE_DELAY_S * 1e3
    assert run == {"urgent": [0.0], "background": [0.0]}  # the fake lanes report no run time: all of it is queue
    assert queue["background"] == pytest.approx(calls["background"])
    assert len(by_lane(cascade, "voxlane_codec_ms")["background"]) == 1  # the codec's own, apart


def test_a_server_that_refines_nothing_exports_no_refiner_metrics(lanes):
    names = {f.name for f in lanes.router.metrics._families}
    assert "voxlane_codec_ms" in names and not any(name.startswith("voxlane_refiner") for name in names)
    assert lanes.router.refiners is None


# 2. the routing rule counts it


@pytest.mark.parametrize("cascade", [{**CASCADE, "margin_floor_s": "0.2"}], indirect=True)
def test_a_slow_background_refinement_sends_a_chunk_urgent_that_its_decode_alone_would_leave_background(cascade):
    """Stream A teaches the router that `refiner` takes 0.3 s (its chunk 1, with 0.64 s of slack over the priors,
    goes background). Stream B's chunk 1 then has 0.64 s before its deadline: its background decode alone (a few ms)
    leaves slack ~0.63 s over a margin of ~0.2 s, background; refinement and decode leave ~0.34 s, below a margin of
    0.2 + 0.3 s, so it goes urgent (low slack) and is refined on `refiner_urgent`."""
    delay(cascade, "refiner", REFINE_DELAY_S)
    assert play(cascade, stream_semantic(16, seed=1)) == ["urgent", "background"]
    assert play(cascade, stream_semantic(16, seed=2)) == ["urgent", "urgent"]
    assert routed(cascade) == {("urgent", "first_chunk"): 2, ("background", "slack_ok"): 1, ("urgent", "low_slack"): 1}
    assert len(cascade.refiners["refiner"].answered) == 1 and len(cascade.refiners["refiner_urgent"].answered) == 3


def test_with_a_fast_refinement_the_same_chunk_stays_in_the_background(cascade):
    """The control of the test above: the same two streams, no delay, every chunk 1 has slack to spare."""
    assert play(cascade, stream_semantic(16, seed=1)) == ["urgent", "background"]
    assert play(cascade, stream_semantic(16, seed=2)) == ["urgent", "background"]


def test_a_track_says_which_chunks_need_a_refinement_call(pb):
    """A chunk whose frames were a chunk before's lookahead needs none: the relay asks the rule for no refinement
    time; one whose window reaches a frame past those does."""
    from backend_python.vox_ensemble.refiner_lanes import RefineTrack
    semantic, track = stream_semantic(12), RefineTrack()
    first, last = arrays_of(semantic, 0, 8, 0, 2), arrays_of(semantic, 8, 2, 2)
    assert track.needs_refinement(first)
    track.refined = np.zeros((10, NUM_OTHER), np.int32)  # chunk 0's window refined, its lookahead too
    assert not track.needs_refinement(last) and track.needs_refinement(arrays_of(semantic, 8, 2, 2, 1))


# 3. urgent refinements count toward the urgent lane's budget


def hold_stream_a(cascade, context: np.ndarray, answer: str):
    """Hold `refiner_urgent`'s calls for the stream whose refine_context is `context` until the returned event is
    set; then answer them (`answer` "codes") or fail them with an error for that request ("error"). The held event
    says a call is being held."""
    refine, held, release = cascade.refiners["refiner_urgent"], threading.Event(), threading.Event()

    def hold(request, decoupled):
        pb = cascade.pb
        if np.array_equal(pb.get_input_tensor_by_name(request, "refine_context").as_numpy()[0], context):
            held.set()
            release.wait(5.0)
            if answer == "error":
                return [pb.InferenceResponse(error=pb.TritonError("refinement failed: boom"))]
        return refine(request, decoupled)
    cascade.pb.SERVER.handlers["refiner_urgent"] = hold
    return held, release


@pytest.mark.parametrize("cascade", [{**CASCADE, "urgent_budget": "1", "margin_floor_s": "5"}], indirect=True)
@pytest.mark.parametrize("answer", ["codes", "error"])
def test_a_refinement_in_flight_on_refiner_urgent_uses_the_urgent_budget_until_it_ends(cascade, answer):
    """Every later chunk has low slack (a 5 s margin floor) and a budget of 1 urgent call. Stream A's first chunk is
    held on `refiner_urgent`: stream B's first chunk still goes urgent, its chunk 1 finds the budget used by A's
    refinement and goes background (urgent_full). Once A's refinement ends (answered, or failed: A ends as
    INTERNAL) the budget is free again and B's chunk 2 goes urgent."""
    a_context = np.array([4, 666, 666, 9], np.int32)
    held, release = hold_stream_a(cascade, a_context, answer)
    first = cascade.speak("Stream A.")
    first_seq = cascade.engine.next_sequence()
    second = cascade.speak("Stream B.")
    second_seq = cascade.engine.next_sequence()
    first_seq.sink.emit(cascade_chunk(stream_semantic(8, seed=3), 0, 0, 8, 0, refine_context=a_context))
    assert held.wait(5.0)
    refiners = cascade.router.refiners
    assert refiners.in_flight(Lane.URGENT) == 1 and cascade.router.codecs.in_flight(Lane.URGENT) == 0
    semantic = stream_semantic(24, seed=4)
    for index, start in enumerate((0, 8)):
        second_seq.sink.emit(cascade_chunk(semantic, index, start, 8, 0))
    assert wait_for(lambda: len(second.sender.responses) == 2)
    release.set()
    if answer == "error":
        chunks, ended = outcome(first)
        assert chunks == [] and ended.reason is EndReason.INTERNAL and "boom" in ended.message
    else:
        assert wait_for(lambda: len(first.sender.responses) == 1)
    assert wait_for(lambda: refiners.in_flight(Lane.URGENT) == 0)
    second_seq.sink.emit(cascade_chunk(semantic, 2, 16, 8, 0, is_last=True))
    cascade.engine.finish(second_seq.request_id, None)
    chunks, ended = outcome(second)
    assert ended is None and [lane for _, lane, _ in chunks] == ["urgent", "background", "urgent"]
    assert routed(cascade)[("background", "urgent_full")] == 1
    assert [np.array_equal(r["refine_context"][0], CONTEXT) for r in cascade.refiners["refiner"].answered] == [True]
    if answer == "codes":
        cascade.engine.finish(first_seq.request_id, None)
        assert outcome(first)[1] is None


def test_a_refinement_call_that_raises_leaves_nothing_in_flight(cascade):
    def broken(request, decoupled):
        raise RuntimeError("the BLS call raised")
    cascade.pb.SERVER.handlers["refiner_urgent"] = broken
    refiners, semantic = cascade.router.refiners, stream_semantic(8)
    with pytest.raises(RuntimeError, match="raised"):
        refiners.refine(Lane.URGENT, semantic, np.zeros((0, NUM_OTHER), np.int32), CONTEXT, {})
    assert refiners.in_flight(Lane.URGENT) == 0 and refiners.batch_size_if_joined(Lane.URGENT) == 1
    assert family(cascade, "voxlane_refiner_ms").metrics[0].observations == []  # a call that raised is no time
