"""Audio-in sessions through the router and the LM glue in-process (fake pb_utils, a fake voice encoder lane, fake
engine): a Triton sequence's pieces of input audio are cut on the fixed chunk grid, each chunk is coded by the
encoder lane and its new frames reach the LM in order, the same however the client cut the input; each piece is
answered at once; bad pieces are refused without touching the stream; a stream that ends from either side (the
client goes, the LM ends it, the encoder dies) frees its LM row and codes nothing more."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from protocol.reasons import Ended, EndReason
from protocol.tensors import INPUT_CHUNK_PARAMETER, PIECE_ERROR_CODES, SEQUENCE_END, SEQUENCE_START
from tests.middle.conftest import STUB_DIED, chunk
from tests.middle.test_router_relay import outcome
from tests.e2e.test_audio_in import cut
from tests.middle.test_router_text_sessions import answer
from tests.waiting import wait_for

RATE = 24000
SAMPLES_PER_FRAME = 1920
NUM_CODEBOOKS = 4  # the fake model's (conftest.FakeSpeechLM)
ENROLL = np.random.default_rng(1).uniform(-0.3, 0.3, RATE).astype(np.float32)
INPUT = np.random.default_rng(2).uniform(-0.5, 0.5, int(2.3 * RATE)).astype(np.float32)  # 29 frames, the last partial
NUM_FRAMES = -(-INPUT.size // SAMPLES_PER_FRAME)
AUDIO_IN = {"mode": "voxlane", "takes_input_audio": "true"}  # what `voxlane serve` renders for a `tse-*` family

pytestmark = pytest.mark.parametrize("lanes", [AUDIO_IN], indirect=True)


def frame_codes(audio: np.ndarray) -> np.ndarray:
    """The fake encoder's codes: one row per frame, from that frame's own samples (so a chunk's codes do not
    depend on where the chunk starts)."""
    starts = audio[::SAMPLES_PER_FRAME]
    return np.repeat((np.abs(starts) * 4000).astype(np.int64)[:, None] % 2048, NUM_CODEBOOKS, axis=1)


class FakeInputEncoder:
    """The `voice_encoder` lane: a speaker embedding for the enrollment, codes for each chunk of input audio."""

    def __init__(self, lanes) -> None:
        self.lanes = lanes
        self.windows: list[int] = []  # the samples of each input chunk's window (context + chunk)
        self.enrollments = 0
        self.is_dead = False

    def __call__(self, request, decoupled: bool):
        pb = self.lanes.pb
        if self.is_dead:
            return [pb.InferenceResponse(error=pb.TritonError(STUB_DIED.format(model="voice_encoder")))]
        audio = pb.get_input_tensor_by_name(request, "ref_audio").as_numpy().reshape(-1)
        if not json.loads(request.parameters()).get(INPUT_CHUNK_PARAMETER):
            self.enrollments += 1
            return [pb.InferenceResponse(output_tensors=[
                pb.Tensor("speaker_embedding", np.full((1, 8), 0.25, np.float32))])]
        self.windows.append(audio.size)
        return [pb.InferenceResponse(output_tensors=[pb.Tensor("ref_codes", frame_codes(audio)[None])])]


@pytest.fixture
def encoder(lanes):
    fake = FakeInputEncoder(lanes)
    lanes.pb.SERVER.handlers["voice_encoder"] = fake
    lanes.lm.model.supports_reference = lanes.lm.model.takes_input = True  # an interleaved family, here
    return fake


def open_session(lanes, session, first_piece: np.ndarray | None = None):
    """The session's first request (its enrollment, its input's rate, maybe a first piece); the LM's sequence."""
    inputs = dict(ref_audio=ENROLL, ref_sample_rate=np.int32(RATE), x_vector_only=np.bool_(True),
                  input_sample_rate=np.int32(RATE))
    if first_piece is not None:
        inputs["input_audio"] = first_piece
    request = lanes.speak(None, session=session, flags=SEQUENCE_START, **inputs)
    return request, lanes.engine.next_sequence()


def piece(lanes, session, samples: np.ndarray, is_final: bool = False, **others):
    return lanes.speak(None, session=session, flags=SEQUENCE_END if is_final else 0,
                       input_audio=np.asarray(samples, np.float32), **others)


def input_frames(lanes, request_id: str) -> tuple[np.ndarray, bool]:
    """The input frames the LM got for `request_id`, joined, and whether its input was closed."""
    got = lanes.engine.inputs.get(request_id, [])
    frames = np.concatenate([f for f, _ in got]) if got else np.zeros((0, NUM_CODEBOOKS), np.int64)
    return frames, bool(got) and got[-1][1]


def test_input_chunks_reach_the_lm_as_codes_in_order_the_same_however_the_input_is_cut(lanes, encoder):
    expected = frame_codes(INPUT)
    rng = random.Random(0)
    for session, pieces in enumerate([[INPUT], cut(INPUT, rng), cut(INPUT, rng)], start=1):
        request, seq = open_session(lanes, session, pieces[0])
        answers = [answer(piece(lanes, session, p)) for p in pieces[1:]]
        answers.append(answer(piece(lanes, session, np.zeros(0), is_final=True)))
        assert answers == [None] * len(answers), [p.size for p in pieces]  # each piece answered at once
        assert wait_for(lambda: input_frames(lanes, seq.request_id)[1]), "the input was never closed"
        frames, _ = input_frames(lanes, seq.request_id)
        np.testing.assert_array_equal(frames, expected, err_msg=str([p.size for p in pieces]))
        lanes.engine.finish(seq.request_id, None)
        assert outcome(request) == ([], None)
    context, chunk_frames = 12, 4  # AudioInLimits' defaults
    assert max(encoder.windows) <= (context + chunk_frames) * SAMPLES_PER_FRAME  # a chunk and its left context
    assert len(encoder.windows) == 3 * -(-NUM_FRAMES // chunk_frames)  # each chunk coded once per session
    assert encoder.enrollments == 3  # the enrollment once per session, before the LM


def test_bad_pieces_are_refused_by_code_and_the_session_goes_on(lanes, encoder):
    request, seq = open_session(lanes, "s1")
    refusals = [answer(piece(lanes, "s1", np.full(10, np.nan))),
                answer(piece(lanes, "s1", np.full(10, 1.5))),
                answer(piece(lanes, "s1", np.zeros(11 * RATE))),  # over max_input_piece_s
                answer(piece(lanes, "s1", INPUT[:100], input_sample_rate=np.int32(16000))),  # the rate changed
                answer(piece(lanes, "s1", INPUT[:100], voice="tiny"))]  # a piece carries only audio
    assert [r.code if r else None for r in refusals] == ["bad_piece"] * 5, refusals
    assert [r.param for r in refusals] == ["input_audio"] * 4 + ["voice"]
    assert answer(piece(lanes, "s1", INPUT, is_final=True)) is None
    assert answer(piece(lanes, "s1", INPUT[:10])).code == "session_closed"  # after the close
    assert wait_for(lambda: input_frames(lanes, seq.request_id)[1])
    np.testing.assert_array_equal(input_frames(lanes, seq.request_id)[0], frame_codes(INPUT))  # refused: no trace
    lanes.engine.finish(seq.request_id, None)
    assert outcome(request) == ([], None)
    assert wait_for(lambda: answer(piece(lanes, "s1", INPUT[:10])).code == "session_ended")
    assert {"bad_piece", "session_closed", "session_ended"} <= set(PIECE_ERROR_CODES)


def test_a_client_that_leaves_mid_input_frees_its_lm_row_and_codes_nothing_more(lanes, encoder):
    request, seq = open_session(lanes, 3, INPUT[:4 * SAMPLES_PER_FRAME])
    assert wait_for(lambda: len(encoder.windows) == 1)
    seq.sink.emit(chunk(0))
    assert wait_for(lambda: len(request.sender.responses) == 1)
    request.sender.cancel()  # the client is gone; its input had not closed
    chunks, ended = outcome(request)
    assert len(chunks) == 1 and ended.reason is EndReason.CANCELLED
    assert lanes.engine.cancelled == [seq.request_id]  # the LM dropped the row
    late = answer(piece(lanes, 3, INPUT[4 * SAMPLES_PER_FRAME:]))
    assert late.code == "session_ended" and len(encoder.windows) == 1  # nothing more is coded
    assert lanes.router.outlet.num_live == 0


def test_an_lm_that_ends_the_stream_ends_its_session_and_later_pieces_are_not_coded(lanes, encoder):
    """The server's side: the LM ends the stream mid-input (here its input idle timeout)."""
    request, seq = open_session(lanes, 4, INPUT[:4 * SAMPLES_PER_FRAME])
    assert wait_for(lambda: len(encoder.windows) == 1)
    timed_out = Ended(EndReason.REFUSED_BAD_INPUT, "no input audio came for 1 s", param="input_audio",
                      code="input_idle_timeout")
    lanes.engine.finish(seq.request_id, timed_out)
    _, ended = outcome(request)
    assert ended.code == "input_idle_timeout"
    assert wait_for(lambda: answer(piece(lanes, 4, INPUT[:SAMPLES_PER_FRAME * 8])).code == "session_ended")
    assert len(encoder.windows) == 1


def test_a_dead_encoder_ends_the_stream_as_lane_down_and_frees_its_lm_row(lanes, encoder):
    request, seq = open_session(lanes, 5)
    encoder.is_dead = True
    assert answer(piece(lanes, 5, INPUT[:8 * SAMPLES_PER_FRAME])) is None  # the piece itself is fine
    _, ended = outcome(request)
    assert ended.reason is EndReason.LANE_DOWN
    assert lanes.engine.cancelled == [seq.request_id]
    assert "voice_encoder" in lanes.pb.SERVER.unloaded  # the router reloads the dead lane


def test_a_session_that_opens_without_an_enrollment_is_refused_by_the_lm(lanes, encoder):
    request = lanes.speak(None, session=6, flags=SEQUENCE_START, input_sample_rate=np.int32(RATE))
    _, ended = outcome(request)
    assert (ended.param, ended.code) == ("ref_audio", "missing_ref_audio")
    assert answer(piece(lanes, 6, INPUT[:10])).code == "session_ended"
