"""A voice to clone through the router and the LM glue in-process (fake pb_utils, a fake voice encoder lane,
fake engine): the router checks the reference, calls `voice_encoder` before the LM and passes its tensors on;
the LM builds the `VoiceReference` its model's prompt takes; every refusal names its input and code."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.reasons import Ended, EndReason
from protocol.tensors import SEQUENCE_START
from protocol.wire import encode_error
from tests.middle.conftest import STUB_DIED, chunk
from tests.middle.test_router_relay import outcome
from tests.reference_audio import voiced
from tests.waiting import wait_for

RATE = 16000
AUDIO = voiced(1.5, RATE)
EMBEDDING_SIZE, NUM_CODEBOOKS = 8, 16


class FakeVoiceEncoder:
    """The `voice_encoder` lane: a speaker embedding (and the reference's codes in-context), or a refusal."""

    def __init__(self, lanes) -> None:
        self.lanes = lanes
        self.calls = []  # (inputs by name, how many LM requests came before it)
        self.refusal: Ended | None = None  # the lane's own coded answer (e.g. no encoder in the family)
        self.is_dead = False
        self.is_empty = False  # answers no tensor at all

    def __call__(self, request, decoupled: bool):
        pb = self.lanes.pb
        assert not decoupled, "the encoder is a plain BLS call: one request, one response"
        inputs = {t.name(): t.as_numpy() for t in request.inputs()}
        self.calls.append((inputs, len(self.lanes.lm_input_names)))
        if self.is_dead:
            return [pb.InferenceResponse(error=pb.TritonError(STUB_DIED.format(model="voice_encoder")))]
        if self.refusal is not None:
            return [pb.InferenceResponse(error=pb.TritonError(encode_error(self.refusal)))]
        if self.is_empty:
            return [pb.InferenceResponse(output_tensors=[])]
        frames = inputs["ref_audio"].shape[1] // 1920
        outputs = [pb.Tensor("speaker_embedding", np.full((1, EMBEDDING_SIZE), 0.25, np.float32))]
        if not inputs["x_vector_only"].reshape(-1)[0]:
            outputs.append(pb.Tensor("ref_codes", np.arange(frames * NUM_CODEBOOKS, dtype=np.int64)
                                     .reshape(1, frames, NUM_CODEBOOKS)))
        return [pb.InferenceResponse(output_tensors=outputs)]


@pytest.fixture
def encoder(lanes):
    fake = FakeVoiceEncoder(lanes)
    lanes.pb.SERVER.handlers["voice_encoder"] = fake
    lanes.lm.model.supports_reference = True  # the fake model clones voices here (an instance attribute)
    return fake


def finish(lanes, request, num_chunks: int = 1):
    seq = lanes.engine.next_sequence()
    for i in range(num_chunks):
        seq.sink.emit(chunk(i))
    lanes.engine.finish(seq.request_id, None)
    return outcome(request)


def test_the_encoder_runs_before_the_lm_and_its_tensors_reach_the_prompt(lanes, encoder):
    request = lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), ref_text="The reference.")
    chunks, ended = finish(lanes, request, num_chunks=2)
    assert ended is None and [i for i, _, _ in chunks] == [0, 1]
    (inputs, lm_requests_before), = encoder.calls
    assert lm_requests_before == 0  # the LM request came after the encoder's answer
    np.testing.assert_array_equal(inputs["ref_audio"].reshape(-1), AUDIO)
    assert inputs["ref_audio"].shape == (1, AUDIO.size) and inputs["ref_sample_rate"].reshape(-1)[0] == RATE
    names = lanes.lm_input_names[0]
    assert {"speaker_embedding", "ref_codes", "ref_text"} <= set(names)
    assert not {"ref_audio", "ref_sample_rate", "x_vector_only"} & set(names)  # the LM never sees the audio
    reference, = lanes.lm.model.references
    assert reference.text == "The reference."
    assert list(reference.tensors["speaker_embedding"].shape) == [EMBEDDING_SIZE]  # the batch dimension is gone
    frames = AUDIO.size // 1920
    assert reference.tensors["ref_codes"].tolist() == np.arange(frames * 16).reshape(frames, 16).tolist()


def test_an_x_vector_reference_sends_the_embedding_alone(lanes, encoder):
    request = lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), x_vector_only=True,
                          ref_text="Ignored for an x-vector.")
    assert finish(lanes, request)[1] is None
    assert bool(encoder.calls[0][0]["x_vector_only"].reshape(-1)[0]) is True
    reference, = lanes.lm.model.references
    assert set(reference.tensors) == {"speaker_embedding"} and reference.text is None
    assert "ref_text" not in lanes.lm_input_names[0]


def test_a_request_without_a_reference_never_calls_the_encoder(lanes, encoder):
    assert finish(lanes, lanes.speak("Plain."))[1] is None
    assert encoder.calls == [] and lanes.lm.model.references == [None]


@pytest.mark.parametrize("inputs, param, code", [
    (dict(ref_audio=np.zeros(0, np.float32), ref_sample_rate=np.int32(RATE), x_vector_only=True),
     "ref_audio", "empty_ref_audio"),
    (dict(ref_audio=AUDIO[:2000], ref_sample_rate=np.int32(RATE), x_vector_only=True), "ref_audio",
     "ref_audio_too_short"),
    (dict(ref_audio=AUDIO * np.float32(3), ref_sample_rate=np.int32(RATE), x_vector_only=True), "ref_audio",
     "ref_audio_out_of_range"),
    (dict(ref_audio=AUDIO, x_vector_only=True), "ref_sample_rate", "missing_ref_sample_rate"),
    (dict(ref_text="Hello."), "ref_text", "missing_ref_audio"),
    (dict(ref_audio=AUDIO, ref_sample_rate=np.int32(RATE)), "ref_text", "missing_ref_text"),
])
def test_a_bad_reference_is_refused_at_once_before_any_lane(lanes, encoder, inputs, param, code):
    request = lanes.speak("Say this.", **inputs)
    assert request.sender.is_final.is_set()  # answered inside execute: no worker thread, no BLS call
    _, ended = outcome(request)
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, param, code)
    assert encoder.calls == [] and lanes.lm_input_names == []


def test_the_encoder_lanes_refusal_reaches_the_client_as_it_is(lanes, encoder):
    """A model whose family has no voice encoder: its lane refuses, the LM is never asked."""
    encoder.refusal = Ended(EndReason.REFUSED_BAD_INPUT, "model 'x' cannot take reference audio", param="ref_audio",
                            code="reference_unsupported")
    _, ended = outcome(lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), x_vector_only=True))
    assert ended == encoder.refusal
    assert lanes.lm_input_names == []
    assert finish(lanes, lanes.speak("The next request is served."))[1] is None


def test_a_model_with_only_cloned_voices_needs_a_reference(lanes, encoder):
    lanes.lm.model.voices = ()  # a Base model: no preset voices
    _, ended = outcome(lanes.speak("Say this."))
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "ref_audio", "missing_ref_audio")
    assert lanes.engine.added.empty()


def test_an_encoder_answer_without_tensors_never_reaches_the_lm(lanes, encoder):
    """Else the LM would speak its own voice and the client would not know its reference was dropped."""
    encoder.is_empty = True
    _, ended = outcome(lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), x_vector_only=True))
    assert ended.reason is EndReason.INTERNAL and "answered none of" in ended.message
    assert lanes.lm_input_names == []


def test_the_lm_refuses_a_reference_its_model_cannot_use(lanes, encoder):
    lanes.lm.model.supports_reference = False
    _, ended = outcome(lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), x_vector_only=True))
    assert (ended.reason, ended.param, ended.code) == (EndReason.REFUSED_BAD_INPUT, "ref_audio",
                                                       "reference_unsupported")
    assert lanes.engine.added.empty()


def test_a_dead_encoder_lane_is_lane_down_and_reloaded(lanes, encoder):
    encoder.is_dead = True
    lanes.pb.SERVER.on_load = lambda model: setattr(encoder, "is_dead", False)
    _, ended = outcome(lanes.speak("Say this.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), x_vector_only=True))
    assert ended.reason is EndReason.LANE_DOWN and "voice_encoder" in ended.message
    assert wait_for(lambda: lanes.router.lane_health.unavailable("voice_encoder") is None)
    assert lanes.pb.SERVER.loaded == ["voice_encoder"]
    request = lanes.speak("Again.", ref_audio=AUDIO, ref_sample_rate=np.int32(RATE), x_vector_only=True)
    assert finish(lanes, request)[1] is None


def test_a_session_takes_its_reference_on_its_first_request(lanes, encoder):
    """The fake model's streaming text takes no reference (base.py's `open_text(voice)`): refused clearly."""
    first = lanes.speak("Hel", session=3, flags=SEQUENCE_START, ref_audio=AUDIO, ref_sample_rate=np.int32(RATE),
                        x_vector_only=True)
    _, ended = outcome(first)
    assert len(encoder.calls) == 1
    assert (ended.param, ended.code) == ("ref_audio", "reference_text_stream_unsupported")


def test_a_session_clones_where_the_model_opens_text_with_a_reference(lanes, encoder):
    opened = []

    def open_text(voice, reference=None):
        opened.append(reference)
        return type(lanes.lm.model).open_text(lanes.lm.model, voice)
    lanes.lm.model.open_text = open_text
    first = lanes.speak("Hel", session=4, flags=SEQUENCE_START, ref_audio=AUDIO, ref_sample_rate=np.int32(RATE),
                        ref_text="The reference.")
    seq = lanes.engine.next_sequence()
    assert opened[0].text == "The reference." and set(opened[0].tensors) == {"speaker_embedding", "ref_codes"}
    lanes.engine.finish(seq.request_id, None)
    assert outcome(first) == ([], None)
