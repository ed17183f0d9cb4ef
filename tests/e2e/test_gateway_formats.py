"""Every `response_format` and output `sample_rate` through the gateway with the `openai` SDK, streamed,
decoded by a decoder independent of the gateway's encoders, and compared with the PCM of the same request."""
from __future__ import annotations

import numpy as np
import openai
import pytest

from server.compare import free_ports
from server.gateway.config import GatewayConfig
from server.gateway.server import GatewayProcess
from tests.audio_decode import aligned_correlation, assert_same_pcm16, below, decode, fft_resample, passband

TEXT = "Formats for every player."
EXTRA = {"seed": 11, "max_audio_seconds": 1.6, "ignore_eos": True}  # 20 frames: chunks of 2, 4, 8, 6
MODEL_RATE = 24000
MAX_PADDING_S = 0.2  # encoder priming and last-frame padding
MIN_CORRELATION = 0.9  # of the waveforms below LOSSY_BAND_HZ (tests/audio_decode.py `below`): measured 0.94-0.999
CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
                 "wav": "audio/wav", "pcm": "audio/pcm"}


@pytest.fixture(scope="module")
def client(server, tmp_path_factory) -> openai.OpenAI:
    config = GatewayConfig(tritons=(server.grpc_url,), port=free_ports(1)[0])
    process = GatewayProcess(config, log_path=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.wait_ready(60)
    yield openai.OpenAI(base_url=process.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    process.stop()


def speak(client, fmt: str, rate: int | None = None) -> tuple[list[bytes], dict]:
    extra = {**EXTRA, **({"sample_rate": rate} if rate else {})}
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", input=TEXT, voice="alloy", response_format=fmt, extra_body=extra) as response:
        return list(response.iter_bytes(chunk_size=None)), dict(response.headers)


@pytest.fixture(scope="module")
def pcm(client):
    """The request's PCM at each rate, as the gateway sends it."""
    cache = {}

    def at(rate: int) -> np.ndarray:
        if rate not in cache:
            pieces, headers = speak(client, "pcm", rate)
            assert headers["x-sample-rate"] == str(rate)
            cache[rate] = decode("pcm", b"".join(pieces))[0]
        return cache[rate]
    return at


@pytest.mark.parametrize("fmt, rate", [("mp3", None), ("mp3", 8000), ("opus", None), ("opus", 48000),
                                       ("aac", None), ("aac", 16000)])
def test_lossy_formats_stream_the_same_sound(client, pcm, fmt, rate):
    pieces, headers = speak(client, fmt, rate)
    rate = rate or MODEL_RATE
    assert headers["content-type"] == CONTENT_TYPES[fmt] and headers["x-sample-rate"] == str(rate)
    assert len([p for p in pieces if p]) > 1  # it arrived in pieces, not as one body at the end
    decoded, decoded_rate = decode(fmt, b"".join(pieces))
    reference = pcm(rate)
    assert decoded_rate in (rate, None)
    assert 0 <= (decoded.size - reference.size) / rate <= MAX_PADDING_S
    correlation, _ = aligned_correlation(below(reference, rate), below(decoded, rate),
                                         max_lag=round(MAX_PADDING_S * rate))
    assert correlation > MIN_CORRELATION, correlation


@pytest.mark.parametrize("fmt, rate", [("flac", None), ("flac", 44100), ("wav", None), ("wav", 22050)])
def test_lossless_formats_decode_to_exactly_the_pcm(client, pcm, fmt, rate):
    pieces, headers = speak(client, fmt, rate)
    assert headers["content-type"] == CONTENT_TYPES[fmt]
    decoded, decoded_rate = decode(fmt, b"".join(pieces))
    assert decoded_rate == (rate or MODEL_RATE)
    reference = pcm(rate or MODEL_RATE)  # another request with the same seed
    assert_same_pcm16(np.round(decoded * 32768.0), np.round(reference * 32768.0))


@pytest.mark.parametrize("rate", [8000, 16000, 48000])
def test_output_rates_are_the_models_audio_resampled(pcm, rate):
    expected = fft_resample(pcm(MODEL_RATE), MODEL_RATE, rate)
    resampled = pcm(rate)
    assert resampled.size == expected.size == round(1.6 * rate)
    # soxr's filter and a brick wall differ in their transition band, near the lower Nyquist frequency
    correlation, lag = aligned_correlation(passband(expected, rate, MODEL_RATE), passband(resampled, rate, MODEL_RATE),
                                           max_lag=10)
    assert lag == 0 and correlation > 0.999  # measured 0.99998 and more (the whole band: 0.978-0.989)


def test_a_rate_the_format_cannot_carry_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as caught:
        speak(client, "opus", 22050)
    assert caught.value.body["param"] == "sample_rate"
