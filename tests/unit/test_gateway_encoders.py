"""The gateway's formats, encoded chunk by chunk and decoded by independent decoders: same length, same sound."""
from __future__ import annotations

import numpy as np
import pytest

from audio.encoders import ChunkEncoder
from protocol.formats import FORMATS
from audio.pcm import pcm16, wav_header
from tests.audio_decode import aligned_correlation, decode, fft_resample

SOURCE_RATE = 24000
CHUNKS = (3840, 7680, 15360, 19200, 1920)  # 2, 4, 8, 10, 1 frames of 1920 samples: the server's ramp
# lossy codecs on broadband audio: waveform correlation after removing their delay
MIN_CORRELATION = {"mp3": 0.9, "opus": 0.9, "aac": 0.85}
MAX_PADDING_S = 0.2  # an encoder's priming and last-frame padding (LAME at 8 kHz: 1105 + 576 samples)


def _speechlike(seconds: float = sum(CHUNKS) / SOURCE_RATE) -> np.ndarray:
    """Harmonics under a syllable-rate envelope plus a little noise: broadband like the tiny model's audio."""
    rng = np.random.default_rng(0)
    t = np.arange(round(seconds * SOURCE_RATE)) / SOURCE_RATE
    voice = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 20))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    return (0.25 * voice * envelope + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


def _stream(fmt: str, audio: np.ndarray, rate: int | None = None) -> list[bytes]:
    encoder = ChunkEncoder(FORMATS[fmt], SOURCE_RATE, rate)
    bounds = np.cumsum((0,) + CHUNKS)
    return [encoder.encode(audio[a:b]) for a, b in zip(bounds, bounds[1:])] + [encoder.finish()]


def test_pcm_and_wav_are_the_bytes_they_were():
    audio = _speechlike()
    assert b"".join(_stream("pcm", audio)) == pcm16(audio)
    parts = _stream("wav", audio)
    assert parts[0] == wav_header(SOURCE_RATE) + pcm16(audio[:CHUNKS[0]]) and parts[-1] == b""
    assert ChunkEncoder(FORMATS["wav"], SOURCE_RATE).finish() == wav_header(SOURCE_RATE)  # no chunk: the header


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_compressed_formats_stream_as_the_chunks_arrive(fmt):
    parts = _stream(fmt, _speechlike())
    streamed, tail = sum(map(len, parts[:-1])), len(parts[-1])
    assert all(parts[1:len(CHUNKS) - 1]), [len(p) for p in parts]  # every full-size chunk sends bytes at once
    assert streamed > 2 * tail


@pytest.mark.parametrize("rate", [8000, 24000, 44100])
def test_flac_decodes_to_exactly_the_pcm(rate):
    audio = _speechlike()
    decoded, decoded_rate = decode("flac", b"".join(_stream("flac", audio, rate)))
    pcm, _ = decode("pcm", b"".join(_stream("pcm", audio, rate)))
    assert decoded_rate == rate
    np.testing.assert_array_equal(decoded, pcm)


@pytest.mark.parametrize("fmt, rate", [("mp3", 8000), ("mp3", 24000), ("mp3", 48000), ("opus", 16000),
                                       ("opus", 24000), ("opus", 48000), ("aac", 22050), ("aac", 24000),
                                       ("aac", 44100)])
def test_lossy_formats_decode_to_the_same_sound_and_length(fmt, rate):
    audio = _speechlike()
    decoded, decoded_rate = decode(fmt, b"".join(_stream(fmt, audio, rate)))
    reference, _ = decode("pcm", b"".join(_stream("pcm", audio, rate)))
    assert decoded_rate in (rate, None)
    extra_s = (decoded.size - reference.size) / rate
    assert -1e-3 <= extra_s <= MAX_PADDING_S
    correlation, _ = aligned_correlation(reference, decoded, max_lag=round(MAX_PADDING_S * rate))
    assert correlation > MIN_CORRELATION[fmt]


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_resampled_pcm_matches_an_independent_resampler(rate):
    audio = _speechlike()
    pcm, _ = decode("pcm", b"".join(_stream("pcm", audio, rate)))
    expected = fft_resample(audio, SOURCE_RATE, rate)
    assert pcm.size == expected.size  # soxr's streaming resampler drains to the exact length at the end
    correlation, lag = aligned_correlation(expected, pcm, max_lag=10)
    assert lag == 0 and correlation > 0.995


def test_a_silent_codec_stream_still_decodes():
    decoded, _ = decode("mp3", b"".join(_stream("mp3", np.zeros(sum(CHUNKS), np.float32))))
    assert decoded.size and np.abs(decoded).max() < 1e-3
