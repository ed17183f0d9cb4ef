"""The router's relay and the LM glue in-process (fake pb_utils, fake codec lanes, fake LM engine):
routing, cancellation and lane death end every stream with the right reason."""
from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from protocol.reasons import Ended, EndReason
from protocol.wire import decode_error
from tests.middle.conftest import SAMPLES_PER_FRAME, chunk
from tests.waiting import wait_for as wait_until


def outcome(request, timeout_s: float = 5.0):
    """(the chunks' (index, lane, samples), the stream's Ended or None when it finished cleanly)."""
    assert request.sender.is_final.wait(timeout_s), "the stream never ended"
    chunks, ended = [], None
    for response in request.sender.responses:
        if response.has_error():
            ended = decode_error(response.error().message())
            continue
        outputs = {t.name(): t.as_numpy() for t in response.output_tensors()}
        chunks.append((int(outputs["chunk_index"][0]), outputs["lane"][0].decode(), outputs["audio"].size))
    return chunks, ended


def one_chunk_stream(lanes, text: str):
    """`outcome` of a stream whose LM sends one chunk and finishes."""
    request = lanes.speak(text)
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    lanes.engine.finish(seq.request_id, None)
    return outcome(request)


def test_chunks_are_routed_decoded_and_sent_in_order(lanes):
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    for i in range(3):
        seq.sink.emit(chunk(i, new_frames=2 + i))
    lanes.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None
    assert [(i, n) for i, _, n in chunks] == [(i, (2 + i) * SAMPLES_PER_FRAME) for i in range(3)]
    assert chunks[0][1] == "urgent"  # a request's first chunk is urgent
    assert lanes.codecs["codec_urgent"].calls + lanes.codecs["codec"].calls == 3


@pytest.mark.parametrize("lanes", ["partition"], indirect=True)
def test_partition_sends_every_chunk_to_the_background_lane(lanes):
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    seq.sink.emit(chunk(1))
    lanes.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and [lane for _, lane, _ in chunks] == ["background", "background"]
    assert lanes.codecs["codec_urgent"].calls == 0


@pytest.mark.parametrize("lanes", ["partition"], indirect=True)
def test_the_background_lane_is_told_each_chunks_place_in_its_stream(lanes):
    """It keeps stream states: the stream's id, the chunk's first frame and whether it is the last."""
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0, new_frames=2))
    seq.sink.emit(chunk(1, new_frames=4, context_frames=2, start_frame=2, is_last=True))
    lanes.engine.finish(seq.request_id, None)
    _, ended = outcome(request)
    assert ended is None
    assert lanes.codecs["codec"].places == [(seq.request_id, 0, False), (seq.request_id, 2, True)]


def test_the_urgent_lane_is_not_told_stream_places(lanes):
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    lanes.engine.finish(seq.request_id, None)
    outcome(request)
    assert lanes.codecs["codec_urgent"].places == [None]


def lane_metrics(lanes, family: str) -> dict[str, float]:
    families = {f.name: f for f in lanes.router.metrics._families}
    return {m.labels["lane"]: m.value for m in families[family].metrics}


@pytest.mark.parametrize("dead, other", [("codec_urgent", "codec"), ("codec", "codec_urgent")])
def test_a_dead_codec_lanes_chunks_go_to_the_other_lane_at_once_and_the_lane_is_reloaded(lanes, dead, other):
    """The chunk that meets the crash is decoded by the other lane: the stream loses no audio."""
    lanes.pb.SERVER.unload_takes_s = 0.2  # readiness shows the unload late: the load must wait for it
    lanes.codecs[dead].is_dead = True
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    for i in range(4):
        seq.sink.emit(chunk(i, new_frames=2, context_frames=2 if i else 0, start_frame=2 * i))
    lanes.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and [(i, n) for i, _, n in chunks] == [(i, 2 * SAMPLES_PER_FRAME) for i in range(4)]
    assert lanes.codecs[other].calls >= 1 and lanes.engine.cancelled == []
    assert wait_until(lambda: lanes.router.lane_health.unavailable(dead) is None)  # reloaded, no operator
    assert lanes.pb.SERVER.unloaded == [dead] and lanes.pb.SERVER.loaded == [dead]  # after the unload showed
    assert lane_metrics(lanes, "voxlane_lane_restarts_total")[dead] == 1
    assert lane_metrics(lanes, "voxlane_lane_up") == {"speechlm_lm": 1, "codec": 1, "codec_urgent": 1,
                                                         "voice_encoder": 1}
    calls = lanes.codecs[dead].calls
    later = lanes.speak()  # the reloaded lane serves again
    later_seq = lanes.engine.next_sequence()
    for i in range(4):
        later_seq.sink.emit(chunk(i, new_frames=2, context_frames=2 if i else 0, start_frame=2 * i))
    lanes.engine.finish(later_seq.request_id, None)
    chunks, ended = outcome(later)
    assert ended is None and len(chunks) == 4 and lanes.codecs[dead].calls > calls


@pytest.mark.parametrize("dead", ["codec", "codec_urgent"])
def test_a_codec_lane_whose_stub_died_is_reloaded_with_no_chunk_sent_to_it(lanes, dead):
    """Under load every chunk may go to the urgent lane: a dead background lane is found by its process (the
    router's codec watch, once a second), not left for the first chunk that would fail on it."""
    lanes.codecs[dead].is_dead = True
    assert wait_until(lambda: lanes.pb.SERVER.loaded == [dead], timeout_s=5)  # no request was sent
    assert wait_until(lambda: lanes.router.lane_health.unavailable(dead) is None, timeout_s=5)
    assert lanes.codecs[dead].calls == 0 and not lanes.codecs[dead].is_dead
    assert lane_metrics(lanes, "voxlane_lane_restarts_total")[dead] == 1


def test_a_lane_that_is_down_shows_in_its_metric_until_it_is_back(lanes):
    gate = threading.Event()
    lanes.pb.SERVER.on_load = lambda model: gate.wait(5) and lanes._fresh_stub(model)
    lanes.codecs["codec_urgent"].is_dead = True
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    assert wait_until(lambda: lane_metrics(lanes, "voxlane_lane_up")["codec_urgent"] == 0)
    assert lanes.router.lane_health.unavailable("codec_urgent").reason is EndReason.LANE_DOWN
    gate.set()
    assert wait_until(lambda: lane_metrics(lanes, "voxlane_lane_up")["codec_urgent"] == 1)
    lanes.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and len(chunks) == 1


def test_with_both_codec_lanes_dead_the_stream_ends_as_lane_down_and_frees_its_lm_slot(lanes):
    lanes.pb.SERVER.on_load = lambda model: None  # the reload never brings them back
    for codec in lanes.codecs.values():
        codec.is_dead = True
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    chunks, ended = outcome(request)
    assert chunks == [] and ended.reason is EndReason.LANE_DOWN and "process died" in ended.message
    assert lanes.engine.cancelled == [seq.request_id]  # the LM stops generating for it


def test_reloading_is_bounded_and_then_left_to_an_operator(lanes):
    def refuse(model):
        raise RuntimeError("load failed")
    lanes.pb.SERVER.on_load = refuse
    lanes.codecs["codec_urgent"].is_dead = True
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    assert wait_until(lambda: "reloading it failed" in (lanes.router.lane_health.unavailable("codec_urgent")
                                                        or Ended(EndReason.DONE)).message)
    assert lanes.pb.SERVER.loaded == ["codec_urgent"] * 3  # lane_reload_attempts
    lanes.pb.SERVER.ready["codec_urgent"] = True  # an operator loaded it
    lanes.codecs["codec_urgent"].is_dead = False
    assert wait_until(lambda: lanes.router.lane_health.unavailable("codec_urgent") is None)
    lanes.engine.finish(seq.request_id, None)
    assert outcome(request)[1] is None  # its chunk went to the other lane meanwhile


def test_a_failing_codec_call_is_internal_not_lane_down(lanes):
    def failing(request, decoupled):
        pb = lanes.pb
        return [pb.InferenceResponse(error=pb.TritonError("codec decode failed: boom"))]
    lanes.pb.SERVER.handlers["codec_urgent"] = failing
    request = lanes.speak()
    lanes.engine.next_sequence().sink.emit(chunk(0))
    _, ended = outcome(request)
    assert ended.reason is EndReason.INTERNAL and "boom" in ended.message
    assert lanes.pb.SERVER.unloaded == []


def test_a_dead_lm_ends_every_live_stream_as_lane_down_and_refuses_new_ones(lanes):
    requests, seqs = [], []
    for i in range(2):  # one at a time: each stream's thread reaches the LM in its own time
        requests.append(lanes.speak(f"Stream {i}."))
        seqs.append(lanes.engine.next_sequence())
    seqs[0].sink.emit(chunk(0))
    assert wait_until(lambda: len(requests[0].sender.responses) == 1)
    lanes.lm_is_dead = True
    assert lanes.router.lm_watch.check() is True
    for request in requests:
        _, ended = outcome(request)
        assert ended.reason is EndReason.LANE_DOWN and "speechlm_lm lane is down" in ended.message
    assert lanes.pb.SERVER.unloaded == ["speechlm_lm"]


def test_a_dead_lm_is_refused_while_it_reloads_and_serves_again_after(lanes):
    gate = threading.Event()
    lanes.pb.SERVER.on_load = lambda model: gate.wait(5) and lanes._fresh_stub(model)
    request = lanes.speak("Before the LM died.")
    lanes.engine.next_sequence()
    lanes.lm_is_dead = True
    assert lanes.router.lm_watch.check() is True
    _, ended = outcome(request)
    assert ended.reason is EndReason.LANE_DOWN
    _, ended = outcome(lanes.speak("While it reloads."))
    assert ended.reason is EndReason.LANE_DOWN and "being reloaded" in ended.message
    gate.set()
    assert wait_until(lambda: lanes.router.lane_health.unavailable("speechlm_lm") is None)
    assert lane_metrics(lanes, "voxlane_lane_restarts_total")["speechlm_lm"] == 1
    chunks, ended = one_chunk_stream(lanes, "After the reload.")
    assert ended is None and len(chunks) == 1


def test_a_client_that_cancels_between_chunks_ends_cancelled_and_the_lm_drops_it(lanes):
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    seq.sink.emit(chunk(0))
    assert wait_until(lambda: len(request.sender.responses) == 1)
    request.sender.cancel()
    seq.sink.emit(chunk(1))  # seen when this chunk arrives (or earlier, by the cancel watch)
    chunks, ended = outcome(request)
    assert [i for i, _, _ in chunks] == [0] and ended.reason is EndReason.CANCELLED
    assert seq.request_id in lanes.engine.cancelled


def test_a_client_that_cancels_while_waiting_for_the_lm_is_dropped_by_the_cancel_watch(lanes):
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    request.sender.cancel()  # no chunk comes: only the cancel watch (every 0.2 s) can see it
    chunks, ended = outcome(request)
    assert chunks == [] and ended.reason is EndReason.CANCELLED
    assert lanes.engine.cancelled == [seq.request_id]


def test_an_lm_failure_mid_stream_ends_the_stream_as_internal(lanes):
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    lanes.engine.finish(seq.request_id, "decode failed: boom")
    _, ended = outcome(request)
    assert ended.reason is EndReason.INTERNAL and ended.message == "decode failed: boom"


def test_an_overloaded_lm_refuses_as_overloaded(lanes):
    lanes.engine.is_accepting = False
    _, ended = outcome(lanes.speak())
    assert ended.reason is EndReason.OVERLOADED and ended.message.startswith("server overloaded")


def test_bad_input_is_refused_with_the_input_it_names(lanes):
    _, ended = outcome(lanes.speak("   "))  # the router's own check, before the LM
    assert (ended.reason, ended.param) == (EndReason.REFUSED_BAD_INPUT, "text")
    _, ended = outcome(lanes.speak(top_p=np.float32(2.0)))
    assert (ended.reason, ended.param) == (EndReason.REFUSED_BAD_INPUT, "top_p")
    _, ended = outcome(lanes.speak(voice="nobody"))  # the LM's check: the model knows its voices
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "voice", "unknown_voice")
    assert "nobody" in ended.message and lanes.engine.added.empty()


def test_a_request_too_long_for_the_kv_cache_is_refused_as_bad_input_at_once(lanes):
    lanes.engine.config = replace(lanes.engine.config, max_seq_len=16)
    _, ended = outcome(lanes.speak(max_audio_seconds=np.float32(10.0)))
    assert ended.reason is EndReason.REFUSED_BAD_INPUT and "max_seq_len is 16" in ended.message


def test_a_stopping_server_ends_the_stream_as_lane_down_and_reloads_nothing(lanes):
    """At SIGTERM Triton refuses the codec calls ("Server not ready"): the stream ends as LANE_DOWN
    (clients retry elsewhere), not INTERNAL, and no lane is taken for dead (no reload while stopping)."""
    def not_ready(model):
        pb = lanes.pb
        return lambda request, decoupled: [pb.InferenceResponse(error=pb.TritonError(
            f"Model {model} - Error when running inference: Server not ready"))]
    for model in ("codec", "codec_urgent"):
        lanes.pb.SERVER.handlers[model] = not_ready(model)
    request = lanes.speak()
    lanes.engine.next_sequence().sink.emit(chunk(0))
    _, ended = outcome(request)
    assert ended.reason is EndReason.LANE_DOWN and "shutting down" in ended.message
    assert lanes.pb.SERVER.unloaded == [] and lanes.router.lane_health.unavailable("codec") is None


def test_an_unloaded_lm_refuses_new_streams_unopened_until_it_is_loaded_again(lanes):
    """Once an LM call is refused as unloaded (a stop's drain unloads the LM first), a request that arrives is
    answered at admission, never opened: a stop's drain waits for the live streams, and one that kept arriving
    through a gateway each stayed live until its own LM call was refused, so "none live" was never seen. Nothing
    is reloaded; the LM serves again once readiness shows an operator loaded it."""
    lm_calls = lanes.pb.SERVER.handlers["speechlm_lm"]
    lanes.pb.SERVER.handlers["speechlm_lm"] = lambda request, decoupled: [lanes.pb.InferenceResponse(
        error=lanes.pb.TritonError("Request for unknown model: 'speechlm_lm' is not found"))]
    lanes.pb.SERVER.ready["speechlm_lm"] = False
    _, ended = outcome(lanes.speak("Reaches the unloaded LM."))
    assert ended.reason is EndReason.LANE_DOWN and "speechlm_lm is unloaded" in ended.message
    assert lane_metrics(lanes, "voxlane_lane_up")["speechlm_lm"] == 0
    calls = []
    lanes.pb.SERVER.handlers["speechlm_lm"] = lambda request, decoupled: calls.append(request) or []
    for i in range(3):
        request = lanes.speak(f"Arrives after the unload {i}.")
        assert request.sender.is_final.is_set()  # answered inside `execute`: no worker thread, never live
        _, ended = outcome(request, timeout_s=0)
        assert ended.reason is EndReason.LANE_DOWN and "speechlm_lm is unloaded" in ended.message
    assert calls == [] and lanes.router.outlet.num_live == 0 and lanes.pb.SERVER.unloaded == []
    lanes.pb.SERVER.handlers["speechlm_lm"] = lm_calls
    lanes.pb.SERVER.ready["speechlm_lm"] = True  # an operator loaded it
    assert wait_until(lambda: lanes.router.lane_health.unavailable("speechlm_lm") is None)
    assert lane_metrics(lanes, "voxlane_lane_up")["speechlm_lm"] == 1
    assert lane_metrics(lanes, "voxlane_lane_restarts_total")["speechlm_lm"] == 0  # no restart: nothing died
    chunks, ended = one_chunk_stream(lanes, "After the load.")
    assert ended is None and len(chunks) == 1


def test_an_unloading_router_ends_every_live_stream_before_its_stub_exits(lanes):
    """At SIGTERM the router's unload races the LM's: each live stream gets its final response, a reason,
    from the router's finalize itself, whether or not the LM's ending reached it (else a client whose worker
    thread had not sent it when the stub exited saw only a closed socket)."""
    requests = []
    for i in range(3):
        requests.append(lanes.speak(f"Stream {i}."))
        seq = lanes.engine.next_sequence()
        if i == 0:
            seq.sink.emit(chunk(0))
    assert wait_until(lambda: len(requests[0].sender.responses) == 1)
    lanes.router.finalize()
    for request in requests:
        assert request.sender.is_final.is_set()  # sent by finalize, not later by a worker thread
        _, ended = outcome(request, timeout_s=0)
        assert ended.reason is EndReason.LANE_DOWN and "shutting down" in ended.message
    assert lanes.router.outlet.num_live == 0


def test_a_chunk_with_lookahead_sends_its_new_frames_and_the_codec_its_window_and_condition(lanes):
    """The codec lanes get the lookahead frames and the stream's condition; each chunk sent holds exactly its
    new frames' samples (the overlap past them is held back for the next chunk's seam)."""
    for codec in lanes.codecs.values():
        codec.overlap_frames = 1
    condition = np.arange(6, dtype=np.float32)
    request = lanes.speak()
    seq = lanes.engine.next_sequence()
    import torch
    seq.sink.emit(chunk(0, new_frames=2, lookahead_frames=3, overlap_frames=1, condition=torch.from_numpy(condition)))
    seq.sink.emit(chunk(1, new_frames=4, context_frames=2, start_frame=2, lookahead_frames=2, overlap_frames=1,
                        condition=torch.from_numpy(condition)))
    seq.sink.emit(chunk(2, new_frames=3, context_frames=2, start_frame=6, is_last=True,
                        condition=torch.from_numpy(condition)))
    lanes.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None
    assert [n for _, _, n in chunks] == [2 * SAMPLES_PER_FRAME, 4 * SAMPLES_PER_FRAME, 3 * SAMPLES_PER_FRAME]
    conditions = lanes.codecs["codec_urgent"].conditions + lanes.codecs["codec"].conditions
    assert len(conditions) == 3 and all(np.array_equal(c, condition) for c in conditions)
