"""A cascade's refinement lanes through the router in-process (fake pb_utils, fake codec and refinement lanes, fake
LM engine): the LM lane's chunks of a first codebook ([T, 1], with `refine_context`) are refined on the lane their
decode is routed to (`refiner_urgent` / `refiner`), each frame once, and decoded as whole frames [T, 4]; a family
without refinement never calls a refiner; a cancelled stream refines nothing more; a dead refinement lane's chunk
goes to the other lane at once while the lane is reloaded, both down ends the stream as LANE_DOWN and frees its LM
row; a lane's error for one request ends that stream only, as INTERNAL. Then RefineTrack alone: chunk windows with
left context and lookahead, each frame refined once, windows rebuilt from the track."""
from __future__ import annotations

import json
import threading
from dataclasses import replace

import numpy as np
import pytest
import torch

from backend_python.engine.sequence import Chunk
from protocol.reasons import Ended, EndReason
from tests.middle import fake_pb_utils
from tests.middle.conftest import SAMPLE_RATE, SAMPLES_PER_FRAME, STUB_DIED, FakeCodec, Lanes, chunk
from tests.middle.test_router_relay import outcome
from tests.waiting import wait_for

REFINERS = ("refiner", "refiner_urgent")
REFINER_OF = {"urgent": "refiner_urgent", "background": "refiner"}
CODEC_OF = {"urgent": "codec_urgent", "background": "codec"}
NUM_OTHER = 3  # the codebooks a refiner writes (a frame is the LM's first codebook and these)
CONTEXT = np.array([4, 101, 102, 103, 104, 9, 9], np.int32)  # what the LM lane sends with each chunk (opaque here)
CASCADE = {"mode": "voxlane", "refines": "true"}  # what `voxlane serve` renders for a cascade (TontaubeV1)
# (start_frame, new frames, left-context frames, lookahead frames) of each chunk of one stream: the first 8 frames
# ahead (so chunk 1 has slack for the background lane), the last with no lookahead
PLAN = [(0, 8, 0, 2), (8, 8, 2, 2), (16, 6, 2, 0)]


def refined_codes(semantic: np.ndarray, num_refined: int) -> np.ndarray:
    """The fake refiner's answer: codebook k of frame f is (semantic[f] * k + 7 * m + k) % 4096, m the frames already
    refined in the request; a frame refined a second time (another m) would get other codes."""
    tail = np.asarray(semantic[num_refined:], np.int64)
    return np.stack([(tail * k + 7 * num_refined + k) % 4096 for k in range(1, NUM_OTHER + 1)], axis=1).astype(np.int32)


def stream_semantic(num_frames: int, seed: int = 0) -> np.ndarray:
    return ((np.arange(num_frames) * 37 + 11 + 1000 * seed) % 4096).astype(np.int32)


def expected(semantic: np.ndarray, plan) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """The refinement calls a stream cut as `plan` needs ((frames sent, frames already refined) each), and the whole
    frames [T, 4] of each chunk's window, each frame refined once, by the first chunk that reaches it."""
    refined, calls, windows = np.zeros((0, NUM_OTHER), np.int32), [], []
    for start, new, context, lookahead in plan:
        low, high = start - context, start + new + lookahead
        if high > refined.shape[0]:
            calls.append((high, refined.shape[0]))
            refined = np.concatenate((refined, refined_codes(semantic[:high], refined.shape[0])))
        windows.append(np.concatenate((semantic[low:high, None], refined[low:high]), axis=1))
    return calls, windows


def cascade_chunk(semantic: np.ndarray, index: int, start: int, new: int, context: int, lookahead: int = 0,
                  is_last: bool = False, refine_context: np.ndarray = CONTEXT) -> Chunk:
    """A cascade's LM chunk: its window of the first codebook [T, 1], and the stream's refine_context."""
    window = semantic[start - context:start + new + lookahead].astype(np.int64)
    return Chunk(index, torch.from_numpy(window)[:, None], context, start_frame=start, is_last=is_last,
                 lookahead_frames=lookahead, refine_context=torch.from_numpy(refine_context.copy()))


def emit_plan(seq, semantic: np.ndarray, plan=PLAN, refine_context: np.ndarray = CONTEXT) -> None:
    for index, (start, new, context, lookahead) in enumerate(plan):
        seq.sink.emit(cascade_chunk(semantic, index, start, new, context, lookahead, is_last=index == len(plan) - 1,
                                    refine_context=refine_context))


class FakeRefiner:
    """A refinement lane: `codes` from its inputs (refined_codes), Triton's answer once its stub has died, or the
    error `fail(inputs)` names for a request; `gate` (an Event) holds each call until set."""

    def __init__(self, model: str, log: list, lock: threading.Lock) -> None:
        self.model, self.is_dead, self.calls = model, False, 0  # calls: every request, a dead lane's too
        self.answered = []  # the inputs {semantic, refined, refine_context, parameters} of each request it refined
        self.fail = None  # inputs -> an error message for that request, or None
        self.shape_error = False  # answer one frame too many (a broken lane)
        self.gate: threading.Event | None = None
        self._log, self._lock = log, lock

    def __call__(self, request, decoupled: bool):
        pb = fake_pb_utils
        with self._lock:
            self.calls += 1
        if self.gate is not None:
            self.gate.wait(5)
        if self.is_dead:
            return [pb.InferenceResponse(error=pb.TritonError(STUB_DIED.format(model=self.model)))]
        inputs = {name: np.array(pb.get_input_tensor_by_name(request, name).as_numpy())
                  for name in ("semantic", "refined", "refine_context")}
        inputs["parameters"] = json.loads(request.parameters())
        if self.fail is not None and (message := self.fail(inputs)) is not None:
            return [pb.InferenceResponse(error=pb.TritonError(message))]
        semantic, refined = inputs["semantic"][0], inputs["refined"][0]
        codes = refined_codes(semantic, refined.shape[0])
        if self.shape_error:
            codes = np.concatenate((codes, codes[-1:]))
        with self._lock:
            self.answered.append(inputs)
            self._log.append((self.model, inputs))
        return [pb.InferenceResponse(output_tensors=[
            pb.Tensor("codes", codes[None]), pb.Tensor("batch_size", np.array([[1]], np.int32)),
            pb.Tensor("run_ms", np.array([[0.0]], np.float32))])]


class RecordingCodec(FakeCodec):
    """A codec lane that also logs the whole frames [1, T, K] of each window it decodes."""

    def __init__(self, model: str, log: list, lock: threading.Lock) -> None:
        super().__init__(model)
        self._log, self._lock = log, lock

    def __call__(self, request, decoupled: bool):
        if not self.is_dead:
            pb = fake_pb_utils
            codes = np.array(pb.get_input_tensor_by_name(request, "codes").as_numpy())
            context = int(pb.get_input_tensor_by_name(request, "context_frames").as_numpy().reshape(-1)[0])
            with self._lock:
                self._log.append((self.model, {"codes": codes, "context_frames": context}))
        return super().__call__(request, decoupled)


class CascadeLanes(Lanes):
    """Lanes with the two refinement lanes too; `log` holds each refinement and decode as the lanes answered it, in
    order (model, inputs)."""

    def __init__(self, pb, mode: str, settings: dict[str, str]) -> None:
        self.log: list[tuple[str, dict]] = []
        self.log_lock = threading.Lock()
        self.refiners = {model: FakeRefiner(model, self.log, self.log_lock) for model in REFINERS}
        super().__init__(pb, mode, settings)
        self.codecs = {model: RecordingCodec(model, self.log, self.log_lock) for model in ("codec", "codec_urgent")}
        pb.SERVER.handlers.update(self.codecs)
        pb.SERVER.handlers.update(self.refiners)

    def _fresh_stub(self, model: str) -> None:
        if model in self.refiners:
            self.refiners[model].is_dead = False
        else:
            super()._fresh_stub(model)

    def _has_live_stub(self, model: str) -> bool:
        if model in self.refiners:
            return not self.refiners[model].is_dead
        return super()._has_live_stub(model)

    def models_in_order(self) -> list[str]:
        with self.log_lock:
            return [model for model, _ in self.log]

    def entries(self, prefix: str) -> list[tuple[str, dict]]:
        with self.log_lock:
            return [(model, inputs) for model, inputs in self.log if model.startswith(prefix)]

    def refiner_calls(self) -> int:
        return sum(refiner.calls for refiner in self.refiners.values())


@pytest.fixture
def cascade(pb, request):
    settings = dict(getattr(request, "param", CASCADE))
    built = CascadeLanes(pb, settings.pop("mode"), settings)
    yield built
    built.close()


def lane_metrics(lanes, family: str) -> dict[str, float]:
    families = {f.name: f for f in lanes.router.metrics._families}
    return {m.labels["lane"]: m.value for m in families[family].metrics}


def check_refined_stream(cascade, semantic: np.ndarray, chunks, plan=PLAN) -> None:
    """Each chunk was refined (where its window reaches unrefined frames) on its routed lane's refiner, then decoded
    on its routed codec lane as whole frames whose codes the refiner wrote, each frame once."""
    calls, windows = expected(semantic, plan)
    lanes = [lane for _, lane, _ in chunks]
    assert [(i, n) for i, _, n in chunks] == [(i, new * SAMPLES_PER_FRAME) for i, (_, new, _, _) in enumerate(plan)]
    models, refined_so_far = [], 0
    for (start, new, _, lookahead), lane in zip(plan, lanes):
        if start + new + lookahead > refined_so_far:
            models.append(REFINER_OF[lane])
            refined_so_far = start + new + lookahead
        models.append(CODEC_OF[lane])
    assert cascade.models_in_order() == models
    refinements = cascade.entries("refiner")
    assert len(refinements) == len(calls)
    refined = np.zeros((0, NUM_OTHER), np.int32)
    for (_, inputs), (num_frames, num_refined) in zip(refinements, calls):
        # the stream's first codebook up to the window's end, and the codes already written for its earlier frames
        assert inputs["semantic"].dtype == np.int32 and inputs["semantic"].shape == (1, num_frames)
        np.testing.assert_array_equal(inputs["semantic"][0], semantic[:num_frames])
        assert inputs["refined"].dtype == np.int32 and inputs["refined"].shape == (1, num_refined, NUM_OTHER)
        np.testing.assert_array_equal(inputs["refined"][0], refined)
        np.testing.assert_array_equal(inputs["refine_context"], CONTEXT[None])
        assert inputs["parameters"] == {}
        refined = np.concatenate((refined, refined_codes(semantic[:num_frames], num_refined)))
    decodes = cascade.entries("codec")
    assert len(decodes) == len(plan)
    for (_, inputs), window, (_, _, context, _) in zip(decodes, windows, plan):
        assert inputs["codes"].shape == (1, window.shape[0], 1 + NUM_OTHER) and inputs["context_frames"] == context
        np.testing.assert_array_equal(inputs["codes"][0], window)


# 1. routing: refined on the lane the decode is routed to, each frame once, decoded as whole frames


def test_a_cascades_chunks_are_refined_on_their_routed_lane_then_decoded_as_whole_frames(cascade):
    semantic = stream_semantic(22)
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    emit_plan(seq, semantic)
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None
    lanes = [lane for _, lane, _ in chunks]
    assert lanes[:2] == ["urgent", "background"]  # a first chunk is urgent; the next has 8 frames of slack
    check_refined_stream(cascade, semantic, chunks)
    first, second = (inputs for _, inputs in cascade.entries("refiner")[:2])
    assert cascade.refiners["refiner_urgent"].answered[0] is first and cascade.refiners["refiner"].answered[0] is second
    # chunk 1's window starts at frame 6: its left context (6, 7) and its first new frames (8, 9: chunk 0's
    # lookahead) carry the codes refined for chunk 0, not refined again
    chunk_1 = cascade.entries("codec")[1][1]["codes"][0]
    np.testing.assert_array_equal(chunk_1[:4, 1:], refined_codes(semantic[:10], 0)[6:10])
    np.testing.assert_array_equal(second["refined"][0], refined_codes(semantic[:10], 0))
    assert cascade.codecs["codec_urgent"].calls == lanes.count("urgent")
    assert cascade.codecs["codec"].calls == lanes.count("background")
    assert cascade.engine.cancelled == []


@pytest.mark.parametrize("cascade", [{"mode": "partition", "refines": "true"}], indirect=True)
def test_partition_refines_and_decodes_every_chunk_on_the_background_lanes(cascade):
    semantic = stream_semantic(22, seed=1)
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    emit_plan(seq, semantic)
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and [lane for _, lane, _ in chunks] == ["background"] * 3
    check_refined_stream(cascade, semantic, chunks)
    assert cascade.refiners["refiner_urgent"].calls == 0 and cascade.codecs["codec_urgent"].calls == 0
    assert cascade.codecs["codec"].places == [(seq.request_id, 0, False), (seq.request_id, 8, False),
                                              (seq.request_id, 16, True)]


@pytest.mark.parametrize("cascade", [{"mode": "partition", "refines": "true"}], indirect=True)
def test_a_chunk_whose_window_was_refined_already_is_decoded_with_no_refinement_call(cascade):
    """The last chunk's 2 new frames were chunk 0's lookahead: its window is built from the track alone."""
    semantic = stream_semantic(10, seed=2)
    plan = [(0, 8, 0, 2), (8, 2, 2, 0)]
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    emit_plan(seq, semantic, plan)
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None
    check_refined_stream(cascade, semantic, chunks, plan)
    assert cascade.refiner_calls() == 1


def test_streams_are_refined_each_on_its_own_track(cascade):
    """Two streams at once: each refinement reads its own stream's codes only."""
    semantics = [stream_semantic(22, seed=3), stream_semantic(22, seed=4)]
    requests, seqs = [], []
    for _ in semantics:
        requests.append(cascade.speak())
        seqs.append(cascade.engine.next_sequence())
    for seq, semantic in zip(seqs, semantics):
        emit_plan(seq, semantic)
        cascade.engine.finish(seq.request_id, None)
    for request in requests:
        chunks, ended = outcome(request)
        assert ended is None and len(chunks) == 3
    refinements = [inputs for _, inputs in cascade.entries("refiner")]
    assert len(refinements) == 6
    for semantic in semantics:
        mine = [r for r in refinements if np.array_equal(r["semantic"][0, :8], semantic[:8])]
        assert [r["semantic"].shape[1] for r in mine] == [10, 18, 22]
        assert [r["refined"].shape[1] for r in mine] == [0, 10, 18]
        np.testing.assert_array_equal(mine[2]["refined"][0], np.concatenate((refined_codes(semantic[:10], 0),
                                                                              refined_codes(semantic[:18], 10))))


def test_the_refinement_calls_carry_the_streams_fault_tag(cascade):
    """The codec parameters of a tagged request (the fault hook) reach the refinement lane too, so that a refiner
    fault can be injected into one request (refiner/model.py)."""
    cascade.router._fault_marker = "FAULT-ME"
    request = cascade.speak("Hello FAULT-ME there.")
    seq = cascade.engine.next_sequence()
    emit_plan(seq, stream_semantic(22), PLAN[:1])
    cascade.engine.finish(seq.request_id, None)
    _, ended = outcome(request)
    assert ended is None
    assert cascade.refiners["refiner_urgent"].answered[0]["parameters"] == {"voxlane_fault_inject": True}


# 2. a family without refinement


@pytest.mark.parametrize("cascade", [{"mode": "voxlane", "refines": "false"}, {"mode": "voxlane"}], indirect=True)
def test_a_family_without_refinement_never_calls_a_refiner(cascade):
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    windows = []
    for i in range(3):
        tokens = torch.arange(4 * (2 + i), dtype=torch.int64).reshape(-1, 4) + 100 * i
        windows.append(tokens.numpy())
        seq.sink.emit(Chunk(i, tokens, 0, start_frame=2 * i, is_last=i == 2))
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and len(chunks) == 3
    assert cascade.refiner_calls() == 0
    decodes = cascade.entries("codec")
    assert [inputs["codes"][0].tolist() for _, inputs in decodes] == [w.tolist() for w in windows]  # as the LM sent
    for refiner in cascade.refiners.values():  # nor does it watch refinement lanes: none is loaded
        refiner.is_dead = True
    assert not any(watch.check() for watch in cascade.router.lane_watches)
    assert cascade.pb.SERVER.unloaded == []


@pytest.mark.parametrize("cascade", [{"mode": "voxlane", "refines": "false"}], indirect=True)
def test_a_cascades_chunk_on_a_router_without_refinement_ends_the_stream_as_internal(cascade):
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    emit_plan(seq, stream_semantic(10), PLAN[:1])
    chunks, ended = outcome(request)
    assert chunks == [] and ended.reason is EndReason.INTERNAL and "without refinement lanes" in ended.message
    assert cascade.refiner_calls() == 0 and cascade.engine.cancelled == [seq.request_id]


@pytest.mark.parametrize("cascade", [{"mode": "timeshare", "refines": "false"}], indirect=True)
def test_in_timeshare_a_cascades_chunk_comes_refined_and_decoded_by_the_lm_and_is_sent_as_it_is(cascade):
    """`voxlane serve` runs no refinement lane in timeshare (refines=false): the LM lane refines and decodes inline,
    its chunk still carries refine_context, and the router sends its audio with no lane call."""
    from types import SimpleNamespace
    cascade.lm.codec = SimpleNamespace(sample_rate=SAMPLE_RATE)  # a timeshare LM lane holds the codec
    semantic = stream_semantic(10)
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    audio = torch.linspace(-0.5, 0.5, 8 * SAMPLES_PER_FRAME)
    seq.sink.emit(replace(cascade_chunk(semantic, 0, 0, 8, 0, 2, is_last=True), audio=audio))
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and chunks == [(0, "inline", 8 * SAMPLES_PER_FRAME)]
    assert cascade.refiner_calls() == 0 and cascade.codecs["codec"].calls + cascade.codecs["codec_urgent"].calls == 0


def test_a_cascade_router_sends_a_chunk_without_refine_context_to_the_codec_as_it_is(cascade):
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    seq.sink.emit(chunk(0, is_last=True))
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and len(chunks) == 1 and cascade.refiner_calls() == 0
    assert cascade.entries("codec")[0][1]["codes"].shape == (1, 2, 4)


# 3. cancellation


def test_a_client_that_cancels_between_chunks_ends_cancelled_and_nothing_more_is_refined(cascade):
    semantic = stream_semantic(22)
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    seq.sink.emit(cascade_chunk(semantic, 0, *PLAN[0]))
    assert wait_for(lambda: len(request.sender.responses) == 1)
    request.sender.cancel()
    seq.sink.emit(cascade_chunk(semantic, 1, *PLAN[1]))
    chunks, ended = outcome(request)
    assert [i for i, _, _ in chunks] == [0] and ended.reason is EndReason.CANCELLED
    assert seq.request_id in cascade.engine.cancelled
    assert cascade.refiner_calls() == 1 and cascade.models_in_order() == ["refiner_urgent", "codec_urgent"]


def test_a_client_that_cancels_during_a_refinement_ends_cancelled_and_nothing_more_is_refined(cascade):
    """The cancel watch tells the LM while the chunk is on the refinement lane; the chunks after it are dropped."""
    semantic = stream_semantic(22)
    gate = threading.Event()
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    seq.sink.emit(cascade_chunk(semantic, 0, *PLAN[0]))
    assert wait_for(lambda: len(request.sender.responses) == 1)
    for refiner in cascade.refiners.values():
        refiner.gate = gate
    seq.sink.emit(cascade_chunk(semantic, 1, *PLAN[1]))
    assert wait_for(lambda: cascade.refiner_calls() == 2)  # chunk 1 is held on its refinement lane
    request.sender.cancel()
    assert wait_for(lambda: seq.request_id in cascade.engine.cancelled)  # the LM is told meanwhile
    gate.set()
    seq.sink.emit(cascade_chunk(semantic, 2, *PLAN[2], is_last=True))
    chunks, ended = outcome(request)
    assert ended.reason is EndReason.CANCELLED and [i for i, _, _ in chunks][:1] == [0]
    assert cascade.refiner_calls() == 2 and len(cascade.entries("refiner")) == 2


# 4. lane death


@pytest.mark.parametrize("dead, other", [("refiner", "refiner_urgent"), ("refiner_urgent", "refiner")])
def test_a_dead_refinement_lanes_chunk_goes_to_the_other_lane_at_once_and_the_lane_is_reloaded(cascade, dead, other):
    """The chunk that meets the crash is refined by the other lane and decoded on its routed codec lane: no audio is
    lost; the router reloads the lane (after its unload showed) and it serves again."""
    cascade.pb.SERVER.unload_takes_s = 0.2
    cascade.refiners[dead].is_dead = True
    semantic = stream_semantic(22)
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    emit_plan(seq, semantic)
    cascade.engine.finish(seq.request_id, None)
    chunks, ended = outcome(request)
    assert ended is None and cascade.engine.cancelled == []
    lanes = [lane for _, lane, _ in chunks]
    assert lanes[:2] == ["urgent", "background"]
    assert cascade.refiners[dead].calls >= 1  # its BLS call met the dead stub
    _, windows = expected(semantic, PLAN)
    decodes = cascade.entries("codec")
    assert [model for model, _ in decodes] == [CODEC_OF[lane] for lane in lanes]  # decoded where routed
    for (_, inputs), window in zip(decodes, windows):
        np.testing.assert_array_equal(inputs["codes"][0], window)
    crashed = lanes.index("background" if dead == "refiner" else "urgent")
    refinements = cascade.entries("refiner")
    assert len(refinements) == 3  # one a chunk: the failed call left nothing to redo
    assert refinements[crashed][0] == other  # the chunk that met the crash, refined on the other lane at once
    assert refinements[crashed][1]["semantic"].shape[1] == [10, 18, 22][crashed]
    assert wait_for(lambda: cascade.router.lane_health.unavailable(dead) is None)
    assert cascade.pb.SERVER.unloaded == [dead] and cascade.pb.SERVER.loaded == [dead]
    assert lane_metrics(cascade, "voxlane_lane_restarts_total")[dead] == 1
    assert all(value == 1 for value in lane_metrics(cascade, "voxlane_lane_up").values())
    answered = len(cascade.refiners[dead].answered)
    later = cascade.speak()  # the reloaded lane serves again
    later_seq = cascade.engine.next_sequence()
    emit_plan(later_seq, stream_semantic(22, seed=5))
    cascade.engine.finish(later_seq.request_id, None)
    chunks, ended = outcome(later)
    assert ended is None and len(chunks) == 3
    assert [lane for _, lane, _ in chunks][:2] == ["urgent", "background"]
    assert len(cascade.refiners[dead].answered) > answered


@pytest.mark.parametrize("dead", REFINERS)
def test_a_refinement_lane_whose_stub_died_is_found_by_its_watch_and_reloaded_with_no_chunk_sent(cascade, dead):
    cascade.refiners[dead].is_dead = True
    found = [watch.check() for watch in cascade.router.lane_watches]  # what the watches' next tick does
    assert found.count(True) == 1
    assert wait_for(lambda: cascade.router.lane_health.unavailable(dead) is None)
    assert cascade.pb.SERVER.unloaded == [dead] and cascade.pb.SERVER.loaded == [dead]
    assert cascade.refiners[dead].calls == 0 and not cascade.refiners[dead].is_dead


def test_with_both_refinement_lanes_down_the_stream_ends_as_lane_down_and_others_go_on(cascade):
    """Stream A's chunk meets both dead lanes: it ends as LANE_DOWN and its LM row is freed; stream B, waiting on the
    LM meanwhile, is not ended, and is served once the lanes are back. A chunk that comes while both are reloading
    ends its stream at once, with no call to either lane."""
    gate = threading.Event()
    cascade.pb.SERVER.on_load = lambda model: gate.wait(5) and cascade._fresh_stub(model)
    first = cascade.speak("Stream A.")
    first_seq = cascade.engine.next_sequence()
    second = cascade.speak("Stream B.")
    second_seq = cascade.engine.next_sequence()
    for refiner in cascade.refiners.values():
        refiner.is_dead = True
    first_seq.sink.emit(cascade_chunk(stream_semantic(22), 0, *PLAN[0]))
    chunks, ended = outcome(first)
    assert chunks == [] and ended.reason is EndReason.LANE_DOWN and ended.reason.value == "lane_down"
    assert "process died" in ended.message and "refiner" in ended.message
    assert cascade.engine.cancelled == [first_seq.request_id]  # the LM stops generating for it
    assert cascade.refiners["refiner_urgent"].calls == 1 and cascade.refiners["refiner"].calls == 1
    assert cascade.codecs["codec"].calls + cascade.codecs["codec_urgent"].calls == 0
    third = cascade.speak("Stream C.")  # while both lanes reload
    third_seq = cascade.engine.next_sequence()
    third_seq.sink.emit(cascade_chunk(stream_semantic(22, seed=6), 0, *PLAN[0]))
    _, ended = outcome(third)
    assert ended.reason is EndReason.LANE_DOWN and "being reloaded" in ended.message
    assert cascade.refiner_calls() == 2 and third_seq.request_id in cascade.engine.cancelled
    assert not second.sender.is_final.is_set() and cascade.router.lane_health.unavailable("speechlm_lm") is None
    gate.set()
    assert wait_for(lambda: all(cascade.router.lane_health.unavailable(m) is None for m in REFINERS))
    semantic = stream_semantic(22, seed=7)
    emit_plan(second_seq, semantic)
    cascade.engine.finish(second_seq.request_id, None)
    chunks, ended = outcome(second)
    assert ended is None and [(i, n) for i, _, n in chunks] == [(0, 8 * SAMPLES_PER_FRAME), (1, 8 * SAMPLES_PER_FRAME),
                                                                 (2, 6 * SAMPLES_PER_FRAME)]
    assert second_seq.request_id not in cascade.engine.cancelled


def test_a_stopping_server_ends_the_stream_as_lane_down_and_reloads_no_refinement_lane(cascade):
    def not_ready(request, decoupled):
        pb = cascade.pb
        return [pb.InferenceResponse(error=pb.TritonError(
            "Model refiner_urgent - Error when running inference: Server not ready"))]
    for model in REFINERS:
        cascade.pb.SERVER.handlers[model] = not_ready
    request = cascade.speak()
    cascade.engine.next_sequence().sink.emit(cascade_chunk(stream_semantic(10), 0, *PLAN[0]))
    _, ended = outcome(request)
    assert ended.reason is EndReason.LANE_DOWN and "shutting down" in ended.message
    assert cascade.pb.SERVER.unloaded == [] and cascade.router.lane_health.unavailable("refiner") is None


# 5. a refinement lane's error that is no death


def test_a_refinement_error_for_one_request_ends_that_stream_only_as_internal(cascade):
    """The lane answers an error for stream A's request (as refiner/model.py does for one that raises): A ends as
    INTERNAL naming the lane, its LM row freed; the lane is not reloaded, the other lane is not asked, and stream B
    is refined on the same lane meanwhile."""
    bad = np.array([4, 666, 666, 9], np.int32)
    cascade.refiners["refiner_urgent"].fail = lambda inputs: (
        "refinement failed: boom" if np.array_equal(inputs["refine_context"][0], bad) else None)
    first = cascade.speak("Stream A.")
    first_seq = cascade.engine.next_sequence()
    second = cascade.speak("Stream B.")
    second_seq = cascade.engine.next_sequence()
    first_seq.sink.emit(cascade_chunk(stream_semantic(22), 0, *PLAN[0], refine_context=bad))
    chunks, ended = outcome(first)
    assert chunks == [] and ended.reason is EndReason.INTERNAL and ended.reason.value == "internal"
    assert "refiner_urgent" in ended.message and "boom" in ended.message
    assert cascade.engine.cancelled == [first_seq.request_id]
    assert cascade.refiners["refiner"].calls == 0 and cascade.codecs["codec_urgent"].calls == 0
    assert cascade.pb.SERVER.unloaded == [] and cascade.router.lane_health.unavailable("refiner_urgent") is None
    semantic = stream_semantic(22, seed=8)
    emit_plan(second_seq, semantic)
    cascade.engine.finish(second_seq.request_id, None)
    chunks, ended = outcome(second)
    assert ended is None and len(chunks) == 3
    assert second_seq.request_id not in cascade.engine.cancelled


def test_a_refinement_lane_that_answers_the_wrong_number_of_frames_ends_the_stream_as_internal(cascade):
    cascade.refiners["refiner_urgent"].shape_error = True
    request = cascade.speak()
    seq = cascade.engine.next_sequence()
    seq.sink.emit(cascade_chunk(stream_semantic(22), 0, *PLAN[0]))
    chunks, ended = outcome(request)
    assert chunks == [] and ended.reason is EndReason.INTERNAL
    assert "codes of shape (11, 3) for 10 frames" in ended.message
    assert cascade.engine.cancelled == [seq.request_id] and cascade.codecs["codec_urgent"].calls == 0


# 6. RefineTrack alone


class FakeRefinerLanes:
    """RefinerLanes' surface for RefineTrack: refined_codes, or `answer` (an Ended, or codes) once."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []  # (lane, semantic, refined, context, parameters)
        self.answer = None

    def refine(self, lane, semantic, refined, context, parameters):
        self.calls.append((lane, semantic.copy(), refined.copy(), np.array(context), parameters))
        if self.answer is not None:
            answer, self.answer = self.answer, None
            return answer
        return refined_codes(semantic, refined.shape[0])


def arrays_of(semantic: np.ndarray, start: int, new: int, context: int, lookahead: int = 0) -> dict:
    """A chunk's arrays as the chunk channel hands them to the relay (speechlm_lm/sinks.py: chunk_arrays)."""
    from backend_python.speechlm_lm.sinks import chunk_arrays
    return chunk_arrays(cascade_chunk(semantic, 0, start, new, context, lookahead), None)


@pytest.fixture
def track_types(pb):
    from backend_python.vox_ensemble.refiner_lanes import RefineTrack
    from scheduler import Lane
    return RefineTrack, Lane


def test_a_track_refines_each_frame_once_and_builds_every_window_from_its_codes(track_types):
    RefineTrack, Lane = track_types
    semantic, lanes, track = stream_semantic(40, seed=9), FakeRefinerLanes(), RefineTrack()
    plan = [(0, 5, 0, 5), (5, 10, 3, 5), (15, 2, 4, 0), (17, 13, 4, 5), (30, 10, 4, 0)]
    calls, windows = expected(semantic, plan)
    for i, (start, new, context, lookahead) in enumerate(plan):
        lane = Lane.URGENT if i == 0 else Lane.BACKGROUND
        window = track.window(arrays_of(semantic, start, new, context, lookahead), lanes, lane, {"p": i})
        np.testing.assert_array_equal(window, windows[i])
    assert [(c[1].shape[0], c[2].shape[0]) for c in lanes.calls] == calls  # chunk 2 (in chunk 1's lookahead): none
    assert [c[0] for c in lanes.calls] == [Lane.URGENT] + [Lane.BACKGROUND] * (len(calls) - 1)
    assert [c[4] for c in lanes.calls] == [{"p": 0}, {"p": 1}, {"p": 3}, {"p": 4}]
    assert all(np.array_equal(c[3], CONTEXT) for c in lanes.calls)
    refined = np.zeros((0, NUM_OTHER), np.int32)
    for _, sent, sent_refined, _, _ in lanes.calls:  # each call: the codes refined before it, never refined again
        np.testing.assert_array_equal(sent, semantic[:sent.shape[0]])
        np.testing.assert_array_equal(sent_refined, refined)
        refined = np.concatenate((refined, refined_codes(sent, refined.shape[0])))
    np.testing.assert_array_equal(track.refined, refined)
    np.testing.assert_array_equal(track.semantic, semantic)
    assert refined.shape == (40, NUM_OTHER)


def test_a_track_refuses_a_chunk_past_the_frames_it_knows(track_types):
    RefineTrack, Lane = track_types
    semantic, lanes, track = stream_semantic(20), FakeRefinerLanes(), RefineTrack()
    track.window(arrays_of(semantic, 0, 5, 0), lanes, Lane.URGENT, {})
    ended = track.window(arrays_of(semantic, 8, 4, 2), lanes, Lane.BACKGROUND, {})  # frames 5 and 6 never came
    assert isinstance(ended, Ended) and ended.reason is EndReason.INTERNAL and "starts at frame 6" in ended.message
    assert len(lanes.calls) == 1


def test_a_track_passes_on_the_lanes_ending_and_refuses_codes_of_the_wrong_shape(track_types):
    RefineTrack, Lane = track_types
    semantic, lanes, track = stream_semantic(20), FakeRefinerLanes(), RefineTrack()
    down = Ended(EndReason.LANE_DOWN, "the refiner lane is down")
    lanes.answer = down
    assert track.window(arrays_of(semantic, 0, 5, 0), lanes, Lane.URGENT, {}) is down
    lanes.answer = np.zeros((4, NUM_OTHER), np.int32)
    ended = track.window(arrays_of(semantic, 0, 5, 0), lanes, Lane.URGENT, {})
    assert ended.reason is EndReason.INTERNAL and "codes of shape (4, 3) for 5 frames" in ended.message
    assert track.refined.shape == (0, NUM_OTHER)  # nothing kept of a refusal


def test_a_track_refines_a_later_segment_from_its_own_first_frame(track_types):
    """A stream spoken in segments (a streamed or a long text): a chunk names its segment's first frame, and the
    lane reads that segment's codes only, continuing the codes refined in it; the window's context before the
    segment keeps the earlier segment's codes."""
    RefineTrack, Lane = track_types
    semantic, lanes, track = stream_semantic(24, seed=5), FakeRefinerLanes(), RefineTrack()
    first = arrays_of(semantic, 0, 12, 0)
    track.window(first, lanes, Lane.URGENT, {})
    second = {**arrays_of(semantic, 12, 6, 3), "segment_start": np.array([12], np.int32)}
    window = track.window(second, lanes, Lane.BACKGROUND, {})
    _, sent, sent_refined, _, _ = lanes.calls[-1]
    np.testing.assert_array_equal(sent, semantic[12:18])  # the second segment's codes from its first frame
    assert sent_refined.shape == (0, NUM_OTHER)  # none of the first segment's codes forced into it
    np.testing.assert_array_equal(window[:3, 1:], track.refined[9:12])  # context: the first segment's codes
    third = {**arrays_of(semantic, 18, 6, 3), "segment_start": np.array([12], np.int32)}
    track.window(third, lanes, Lane.BACKGROUND, {})
    _, sent, sent_refined, _, _ = lanes.calls[-1]
    np.testing.assert_array_equal(sent, semantic[12:24])
    np.testing.assert_array_equal(sent_refined, track.refined[12:18])
    bad = {**arrays_of(semantic, 18, 6, 3), "segment_start": np.array([30], np.int32)}
    assert track.window(bad, lanes, Lane.BACKGROUND, {}).reason.value == "internal"  # past what is refined
