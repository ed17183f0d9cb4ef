"""The router's output options in-process (fake pb_utils, fake lanes): a stream in `flac` carries bytes
that decode to exactly the PCM the codec made, its encoder flushed whether or not the LM marked a chunk
last; the LM never sees the options; a bad option is refused before any model work."""
from __future__ import annotations

import numpy as np
import pytest

from audio.pcm import pcm16
from protocol.reasons import EndReason
from protocol.wire import decode_error
from protocol.tensors import MAX_UNREAD_AUDIO_S
from tests.audio_decode import decode
from tests.middle.conftest import SAMPLE_RATE, chunk

FRAMES = (2, 4, 8)  # the chunks' new frames


def tone(num_samples: int) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * 220 * np.arange(num_samples) / SAMPLE_RATE)).astype(np.float32)


def responses(request, timeout_s: float = 5.0) -> list[dict]:
    """Each response's outputs by name; the stream must end cleanly."""
    assert request.sender.is_final.wait(timeout_s), "the stream never ended"
    out = []
    for response in request.sender.responses:
        assert not response.has_error(), response.error().message()
        out.append({t.name(): t.as_numpy() for t in response.output_tensors()})
    return out


def play(lanes, mark_last: bool, **inputs) -> list[dict]:
    for codec in lanes.codecs.values():
        codec.signal = tone
    request = lanes.speak(**inputs)
    seq = lanes.engine.next_sequence()
    start = 0
    for i, frames in enumerate(FRAMES):
        seq.sink.emit(chunk(i, new_frames=frames, start_frame=start, is_last=mark_last and i == len(FRAMES) - 1))
        start += frames
    lanes.engine.finish(seq.request_id, None)
    return responses(request)


def expected_audio() -> np.ndarray:
    from tests.middle.conftest import SAMPLES_PER_FRAME
    return np.concatenate([tone(f * SAMPLES_PER_FRAME) for f in FRAMES])


@pytest.mark.parametrize("mark_last", [True, False])
def test_a_flac_stream_decodes_to_exactly_the_pcm(lanes, mark_last):
    out = play(lanes, mark_last, audio_format="flac")
    # a chunk marked last flushes the encoder; else one tail chunk follows the last, in its lane
    assert [int(o["chunk_index"][0]) for o in out] == list(range(len(FRAMES) + (0 if mark_last else 1)))
    assert all(o["audio"].size == 0 and int(o["sample_rate"][0]) == SAMPLE_RATE for o in out)
    if not mark_last:
        assert out[-1]["lane"][0] == out[-2]["lane"][0]
    decoded, rate = decode("flac", b"".join(bytes(o["audio_bytes"][0]) for o in out))
    assert rate == SAMPLE_RATE
    np.testing.assert_array_equal(decoded, decode("pcm", pcm16(expected_audio()))[0])


def test_the_lm_never_sees_the_output_options(lanes):
    play(lanes, True, audio_format="mp3", sample_rate=np.int32(16000), seed=np.int64(3))
    assert lanes.lm_input_names == [["speech_request", MAX_UNREAD_AUDIO_S]]  # parsed once; and the router's bound
    request, = lanes.lm_requests
    assert request["seed"] == 3 and request["text"] and not {"audio_format", "sample_rate"} & set(request)


def test_default_options_send_the_codecs_audio_as_before(lanes):
    out = play(lanes, True)
    assert all("audio_bytes" not in o for o in out)
    np.testing.assert_array_equal(np.concatenate([o["audio"] for o in out]), expected_audio())


@pytest.mark.parametrize("mark_last", [True, False])
def test_resampled_fp32_reports_its_rate_and_keeps_the_duration(lanes, mark_last):
    out = play(lanes, mark_last, sample_rate=np.int32(16000))
    assert {int(o["sample_rate"][0]) for o in out} == {16000}
    assert sum(o["audio"].size for o in out) == expected_audio().size * 16000 // SAMPLE_RATE


@pytest.mark.parametrize("inputs, param", [(dict(audio_format="ogg"), "audio_format"),
                                           (dict(sample_rate=np.int32(11025)), "sample_rate")])
def test_a_bad_option_is_refused_at_once(lanes, inputs, param):
    request = lanes.speak(**inputs)
    assert request.sender.is_final.is_set()  # before any model work
    (response,) = request.sender.responses
    ended = decode_error(response.error().message())
    assert ended.reason is EndReason.REFUSED_BAD_INPUT and ended.param == param
    assert lanes.lm_input_names == []
