"""The output options of `vox_ensemble` (`audio_format`, `sample_rate`): parsed and refused without a
server, and one stream's audio processed chunk by chunk as they ask."""
from __future__ import annotations

import numpy as np
import pytest

from protocol.formats import SAMPLE_RATES, TRITON_FORMATS
from audio.pcm import pcm16
from audio.stream import StreamAudio
from backend_python.stub_common.request_inputs import AudioOptions, RequestError, parse_audio_options
from protocol.tensors import LM_INPUT_NAMES, REQUEST_INPUTS
from tests.audio_decode import decode

SOURCE_RATE = 24000
CHUNKS = (3840, 7680, 15360, 1920)  # 2, 4, 8, 1 frames: the server's ramp, then a short last chunk


def parse(**inputs):
    arrays = {k: v if isinstance(v, np.ndarray) else np.array([v]) for k, v in inputs.items()}
    return parse_audio_options(arrays.get)


def _audio() -> np.ndarray:
    t = np.arange(sum(CHUNKS)) / SOURCE_RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)


def _pieces(stream: StreamAudio, audio: np.ndarray, mark_last: bool):
    bounds = np.cumsum((0,) + CHUNKS)
    pieces = [stream.process(audio[a:b], SOURCE_RATE, is_last=mark_last and b == bounds[-1])
              for a, b in zip(bounds, bounds[1:])]
    return pieces + ([] if (tail := stream.tail()) is None else [tail])


def test_the_defaults_are_the_models_fp32_audio():
    assert parse() == AudioOptions("pcm_f32", None) and not parse().is_encoded
    assert REQUEST_INPUTS["audio_format"].default == "pcm_f32"


@pytest.mark.parametrize("fmt", TRITON_FORMATS)
def test_every_format_and_rate_passes(fmt):
    rate = 48000
    assert parse(audio_format=np.array([fmt.encode()], dtype=object), sample_rate=np.int32(rate)) == \
        AudioOptions(fmt, rate)
    assert parse(audio_format=np.array([fmt.encode()], dtype=object)).is_encoded == (fmt != "pcm_f32")


@pytest.mark.parametrize("inputs, param, message", [
    (dict(audio_format=np.array([b"ogg"], dtype=object)), "audio_format", "input 'audio_format' must be one of"),
    (dict(audio_format=np.array([b"\xff"], dtype=object)), "audio_format", "not valid UTF-8"),
    (dict(audio_format=np.array([b"mp3", b"wav"], dtype=object)), "audio_format", "exactly one value"),
    (dict(sample_rate=np.int32(11025)), "sample_rate", "input 'sample_rate' must be one of 8000, 16000"),
    (dict(sample_rate=np.int32(0)), "sample_rate", "must be one of"),
    (dict(audio_format=np.array([b"opus"], dtype=object), sample_rate=np.int32(22050)), "sample_rate",
     "audio_format 'opus' carries sample_rate 8000, 16000, 24000, 48000 only"),
])
def test_bad_options_are_refused_naming_the_input(inputs, param, message):
    with pytest.raises(RequestError, match=message) as caught:
        parse(**inputs)
    assert caught.value.ended.param == param


def test_the_lm_never_gets_the_output_options():
    assert "audio_format" not in LM_INPUT_NAMES and "sample_rate" not in LM_INPUT_NAMES
    assert "text" in LM_INPUT_NAMES and "ignore_eos" in LM_INPUT_NAMES


def test_default_options_pass_chunks_through_untouched():
    stream, audio = StreamAudio(), _audio()
    assert stream.is_passthrough
    piece = stream.process(audio[:100], SOURCE_RATE)
    np.testing.assert_array_equal(piece.audio, audio[:100])
    assert piece.data is None and piece.sample_rate == SOURCE_RATE and stream.tail() is None


@pytest.mark.parametrize("mark_last", [True, False])
def test_flac_pieces_decode_to_exactly_the_pcm(mark_last):
    """Flushed into the last chunk when it is marked last, else into the tail; either way nothing is lost."""
    audio = _audio()
    pieces = _pieces(StreamAudio("flac"), audio, mark_last)
    assert len(pieces) == len(CHUNKS) + (0 if mark_last else 1)
    assert all(p.audio.size == 0 and p.sample_rate == SOURCE_RATE for p in pieces)
    decoded, rate = decode("flac", b"".join(p.data for p in pieces))
    assert rate == SOURCE_RATE
    np.testing.assert_array_equal(decoded, decode("pcm", pcm16(audio))[0])


@pytest.mark.parametrize("mark_last", [True, False])
@pytest.mark.parametrize("rate", [8000, 44100])
def test_resampled_fp32_keeps_the_duration(rate, mark_last):
    audio = _audio()
    pieces = _pieces(StreamAudio("pcm_f32", rate), audio, mark_last)
    out = np.concatenate([p.audio for p in pieces])
    assert all(p.data is None and p.sample_rate == rate for p in pieces)
    assert out.size == round(audio.size * rate / SOURCE_RATE)  # soxr's delay flushed, not lost
    assert abs(np.abs(out).max() - np.abs(audio).max()) < 0.05


def test_a_stream_with_no_chunk_sends_nothing():
    assert StreamAudio("mp3").tail() is None and StreamAudio("pcm_f32", 8000).tail() is None


def test_every_sample_rate_is_an_input_value():
    assert set(SAMPLE_RATES) == {8000, 16000, 22050, 24000, 44100, 48000}


def _config_names(model: str, section: str) -> list[str]:
    import re

    from server.serve import REPOSITORY
    text = (REPOSITORY / model / "config.pbtxt").read_text()
    block = re.search(rf"^{section} \[(.*?)^\]", text, re.S | re.M).group(1)
    return re.findall(r'name: "(\w+)"', block)


def test_the_configs_accept_what_the_table_names():
    """vox_ensemble takes every request input and the control inputs and sends `audio_bytes`; speechlm_lm
    takes only the LM's, its backpressure bound and its listener's playback speed, its control inputs (cancel, backpressure, streaming text, input audio, the voice listing, a
    deleted voice) and
    a voice to clone as the encoder made it; voice_encoder takes the reference audio and answers its tensors, or what
    the model's voices hold (`voice_spec`)."""
    from protocol.tensors import (CONTROL_INPUTS, INPUT_NAMES, MAX_UNREAD_AUDIO_S, PLAYBACK_SPEED, REFERENCE_LM_INPUTS,
                                  REFERENCE_TENSORS, SPEECH_REQUEST, RESPONSE_OUTPUTS, TAKEN_FRAMES, TEXT_FINAL, TEXT_OPEN, TEXT_PIECE,
                                  INPUT_CODES, INPUT_FINAL, LIST_VOICES, FORGET_VOICE, VOICES_OUTPUT, VOICE_SPEC)
    assert _config_names("vox_ensemble", "input") == [*INPUT_NAMES, *CONTROL_INPUTS]
    assert _config_names("vox_ensemble", "output") == list(RESPONSE_OUTPUTS)
    assert _config_names("speechlm_lm", "input") == [*LM_INPUT_NAMES, SPEECH_REQUEST, MAX_UNREAD_AUDIO_S,
                                                     PLAYBACK_SPEED, "cancel",
                                                     TAKEN_FRAMES,
                                                     TEXT_OPEN, TEXT_PIECE, TEXT_FINAL, INPUT_CODES, INPUT_FINAL,
                                                     LIST_VOICES, FORGET_VOICE, *REFERENCE_LM_INPUTS]
    assert VOICES_OUTPUT in _config_names("speechlm_lm", "output")  # the answer to `list_voices`
    assert _config_names("voice_encoder", "input") == ["ref_audio", "ref_sample_rate", "x_vector_only"]
    assert _config_names("voice_encoder", "output") == [*REFERENCE_TENSORS, VOICE_SPEC]
