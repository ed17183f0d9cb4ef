"""A voice to clone: the router's torch-free checks of the reference inputs, and the encoder lane's resampling."""
from __future__ import annotations

import time

import numpy as np
import pytest

from backend_python.stub_common.reference_inputs import ReferenceLimits, check_reference_audio, parse_reference, resample
from backend_python.stub_common.request_inputs import RequestError
from protocol.tensors import scalar_array
from tests.reference_audio import voiced

LIMITS = ReferenceLimits()
RATE = 16000
GOOD = voiced(2.0, RATE)


def parse(limits: ReferenceLimits = LIMITS, needs_text: bool = True, **inputs):
    arrays = {name: scalar_array(name, value) for name, value in inputs.items()}
    return parse_reference(arrays.get, limits, needs_text)


def with_sample(index: int, value: float) -> np.ndarray:
    audio = GOOD.copy()
    audio[index] = value
    return audio


def test_no_reference_is_none():
    assert parse() is None


def test_an_in_context_reference_keeps_its_transcript():
    reference = parse(ref_audio=GOOD, ref_sample_rate=RATE, ref_text="  Hello there.  ")
    assert reference.text == "Hello there." and not reference.x_vector_only
    assert reference.sample_rate == RATE and reference.audio.dtype == np.float32
    np.testing.assert_array_equal(reference.audio, GOOD)


def test_an_x_vector_reference_needs_no_transcript_and_drops_one():
    assert parse(ref_audio=GOOD, ref_sample_rate=RATE, x_vector_only=True).text is None
    assert parse(ref_audio=GOOD, ref_sample_rate=RATE, x_vector_only=True, ref_text="Hi.").text is None


BAD = [
    pytest.param(dict(ref_audio=np.zeros(0, np.float32), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "empty_ref_audio", "is empty", id="empty"),
    pytest.param(dict(ref_audio=GOOD[:RATE // 4], ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_too_short", "at least 0.5 s", id="too-short"),
    pytest.param(dict(ref_audio=voiced(61.0, 8000), ref_sample_rate=8000, x_vector_only=True),
                 "ref_audio", "ref_audio_too_long", "limit is 60 s", id="too-long"),
    pytest.param(dict(ref_audio=with_sample(1234, np.nan), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_not_finite", "sample 1234 is nan", id="nan"),
    pytest.param(dict(ref_audio=with_sample(99, -np.inf), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_not_finite", "sample 99 is -inf", id="inf"),
    pytest.param(dict(ref_audio=with_sample(7, 1.5), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_out_of_range", r"\[-1, 1\]: sample 7 is 1.5", id="out-of-range"),
    pytest.param(dict(ref_audio=GOOD * 1e-4, ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_silent", "is silent", id="silent"),
    pytest.param(dict(ref_audio=np.zeros(RATE, np.float32), ref_sample_rate=RATE, x_vector_only=True),
                 "ref_audio", "ref_audio_silent", "is silent", id="all-zero"),
    pytest.param(dict(ref_audio=GOOD, x_vector_only=True),
                 "ref_sample_rate", "missing_ref_sample_rate", "needs 'ref_sample_rate'", id="no-rate"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=4000, x_vector_only=True),
                 "ref_sample_rate", "unsupported_ref_sample_rate", r"\[8000, 48000\] Hz, got 4000", id="rate-low"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=96000, x_vector_only=True),
                 "ref_sample_rate", "unsupported_ref_sample_rate", "got 96000", id="rate-high"),
    pytest.param(dict(ref_text="Hello."), "ref_text", "missing_ref_audio", "send 'ref_audio'", id="text-no-audio"),
    pytest.param(dict(ref_sample_rate=RATE), "ref_sample_rate", "missing_ref_audio", "send 'ref_audio'",
                 id="rate-no-audio"),
    pytest.param(dict(x_vector_only=True), "x_vector_only", "missing_ref_audio", "send 'ref_audio'",
                 id="x-vector-no-audio"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=RATE), "ref_text", "missing_ref_text",
                 "in-context cloning needs 'ref_text'", id="in-context-no-text"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=RATE, ref_text="  \n "), "ref_text", "missing_ref_text",
                 "needs 'ref_text'", id="in-context-blank-text"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=RATE, ref_text=b"caf\xc3\x28"), "ref_text", None,
                 "not valid UTF-8", id="text-invalid-utf8"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=RATE, ref_text="bell\x07"), "ref_text", None,
                 "control character", id="text-control-char"),
    pytest.param(dict(ref_audio=GOOD, ref_sample_rate=RATE, ref_text="a" * 2001), "ref_text", None,
                 "limit is 2000", id="text-too-long"),
]


@pytest.mark.parametrize("inputs, param, code, message", BAD)
def test_every_bad_reference_names_its_input_and_code(inputs, param, code, message):
    with pytest.raises(RequestError, match=message) as caught:
        parse(**inputs)
    assert (caught.value.param, caught.value.code) == (param, code)
    ended = caught.value.ended
    assert ended.reason.value == "bad_input" and ended.param == param


def test_the_limits_are_the_parameters():
    limits = ReferenceLimits.from_parameters({"max_ref_audio_s": "3", "min_ref_audio_s": "1"})
    assert (limits.max_ref_audio_s, limits.min_ref_audio_s) == (3.0, 1.0)
    assert ReferenceLimits.from_parameters(LIMITS.to_parameters()) == LIMITS
    with pytest.raises(RequestError, match="limit is 3 s"):
        check_reference_audio(voiced(3.5, RATE), RATE, limits)
    with pytest.raises(RequestError, match="at least 1 s"):
        check_reference_audio(voiced(0.9, RATE), RATE, limits)
    with pytest.raises(ValueError, match="inconsistent"):
        ReferenceLimits(min_ref_audio_s=2.0, max_ref_audio_s=1.0)


def test_a_sample_just_past_full_scale_is_within_the_tolerance():
    check_reference_audio(with_sample(3, 1.005), RATE, LIMITS)
    check_reference_audio(with_sample(3, -1.0), RATE, LIMITS)
    with pytest.raises(RequestError, match="sample 3"):
        check_reference_audio(with_sample(3, -1.02), RATE, LIMITS)


def test_the_encoder_lane_does_not_need_the_transcript():
    assert parse(needs_text=False, ref_audio=GOOD, ref_sample_rate=RATE).text is None


def test_the_longest_reference_is_checked_in_milliseconds():
    audio = voiced(60.0, 48000)  # 2.88 M samples: the largest the limits allow
    started = time.perf_counter()
    check_reference_audio(audio, 48000, LIMITS)
    assert time.perf_counter() - started < 0.2


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampling_keeps_duration_and_pitch(rate):
    target = 24000
    audio = (0.5 * np.sin(2 * np.pi * 440.0 * np.arange(rate) / rate)).astype(np.float32)  # 1 s of A4
    out = resample(audio, rate, target)
    assert out.dtype == np.float32 and abs(out.size - target) <= 1
    spectrum = np.abs(np.fft.rfft(out[target // 10: -target // 10]))
    peak_hz = np.argmax(spectrum) * target / (2 * (spectrum.size - 1))
    assert abs(peak_hz - 440.0) < 3.0
    assert np.max(np.abs(out)) == pytest.approx(0.5, abs=0.02)


def test_resampling_to_the_same_rate_is_the_audio_itself():
    assert resample(GOOD, RATE, RATE) is GOOD
