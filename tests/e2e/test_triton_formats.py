"""`audio_format` and `sample_rate` for direct Triton clients: each format streamed over gRPC as
`audio_bytes`, decoded by a decoder independent of the router's encoders, and compared with the same
request's default FP32 `audio`; a resampled rate in FP32; bad options refused naming the input."""
from __future__ import annotations

import numpy as np
import pytest

from audio.pcm import pcm16
from clients.stream import StreamError, synthesize
from protocol.reasons import EndReason
from tests.audio_decode import aligned_correlation, below, decode, fft_resample, passband

TEXT = "Formats for every player."
PARAMS = {"seed": 11, "max_audio_seconds": 1.6, "ignore_eos": True}  # 20 frames: chunks of 2, 4, 8, 6
MODEL_RATE = 24000
MAX_PADDING_S = 0.2  # encoder priming and last-frame padding
LSB = 1 / 32768
MIN_CORRELATION = 0.9  # of the waveforms below LOSSY_BAND_HZ (tests/audio_decode.py `below`): measured 0.94-0.999


def speak(url: str, **options):
    return synthesize(url, TEXT, **PARAMS, **options)


@pytest.fixture(scope="module")
def reference(url) -> np.ndarray:
    """The request's default output: FP32 `audio` at the model's rate, no `audio_bytes`."""
    result = speak(url)
    assert result.sample_rate == MODEL_RATE and all(c.data is None for c in result.chunks)
    return result.audio


def encoded(url: str, fmt: str, rate: int | None = None) -> tuple[bytes, int]:
    result = speak(url, audio_format=fmt, sample_rate=rate)
    assert result.chunks and all(c.audio.size == 0 and c.data is not None for c in result.chunks)
    assert [c.index for c in result.chunks] == list(range(len(result.chunks)))
    assert len([c for c in result.chunks if c.data]) > 1  # it arrived chunk by chunk, not at the end
    assert {c.sample_rate for c in result.chunks} == {rate or MODEL_RATE}
    return result.data, rate or MODEL_RATE


@pytest.mark.parametrize("fmt, rate", [("flac", None), ("wav", None), ("pcm", None), ("flac", 44100)])
def test_lossless_formats_decode_to_exactly_the_pcm(url, reference, fmt, rate):
    data, rate = encoded(url, fmt, rate)
    decoded, decoded_rate = decode(fmt, data)
    assert decoded_rate in (rate, None)
    expected = decode("pcm", pcm16(reference if rate == MODEL_RATE else speak(url, sample_rate=rate).audio))[0]
    # two requests' float audio may differ in its last bits (which lane decoded a chunk): one 16-bit step
    assert decoded.size == expected.size
    np.testing.assert_allclose(decoded, expected, rtol=0, atol=LSB)


@pytest.mark.parametrize("fmt, rate", [("mp3", None), ("mp3", 8000), ("opus", None), ("opus", 48000),
                                       ("aac", None), ("aac", 16000)])
def test_lossy_formats_stream_the_same_sound(url, reference, fmt, rate):
    data, rate = encoded(url, fmt, rate)
    decoded, decoded_rate = decode(fmt, data)
    assert decoded_rate in (rate, None)
    expected = reference if rate == MODEL_RATE else fft_resample(reference, MODEL_RATE, rate)
    assert 0 <= (decoded.size - expected.size) / rate <= MAX_PADDING_S
    correlation, _ = aligned_correlation(below(expected, rate), below(decoded, rate),
                                         max_lag=round(MAX_PADDING_S * rate))
    assert correlation > MIN_CORRELATION, correlation


@pytest.mark.parametrize("rate", [8000, 22050, 48000])
def test_a_resampled_rate_in_fp32_is_the_models_audio_resampled(url, reference, rate):
    result = speak(url, sample_rate=rate)
    assert {c.sample_rate for c in result.chunks} == {rate} and all(c.data is None for c in result.chunks)
    expected = fft_resample(reference, MODEL_RATE, rate)
    assert result.audio.size == expected.size == round(1.6 * rate)
    correlation, lag = aligned_correlation(passband(expected, rate, MODEL_RATE),
                                           passband(result.audio, rate, MODEL_RATE), max_lag=10)
    assert lag == 0 and correlation > 0.999  # measured 0.99998 and more (the whole band: 0.978-0.989)


@pytest.mark.parametrize("options, param", [({"audio_format": "ogg"}, "audio_format"),
                                            ({"sample_rate": 11025}, "sample_rate"),
                                            ({"audio_format": "opus", "sample_rate": 22050}, "sample_rate")])
def test_a_bad_option_is_refused_naming_the_input(url, options, param):
    with pytest.raises(StreamError) as caught:
        speak(url, **options)
    assert caught.value.ended.reason is EndReason.REFUSED_BAD_INPUT and caught.value.ended.param == param
