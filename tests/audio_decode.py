"""Decoders that share no code with the gateway's FFmpeg encoders, and ways to compare their output.

mp3 and flac: miniaudio's dr_mp3 and dr_flac; opus (Ogg): libsndfile (with libopus); wav: Python's `wave`.
AAC has no decoder on PyPI outside FFmpeg: Debian's `faad` (libfaad2) when it is on PATH, else FFmpeg's
own AAC *decoder* through PyAV (other code than its encoder, but the same library).
"""
from __future__ import annotations

import io
import shutil
import subprocess
import wave

import numpy as np


def decode(fmt: str, data: bytes) -> tuple[np.ndarray, int]:
    """(float32 mono samples, sample rate) of one whole response body."""
    return _decoders()[fmt](data)


def _pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0


def _wav(data: bytes):
    with wave.open(io.BytesIO(_with_sizes(data))) as reader:
        return _pcm16(reader.readframes(reader.getnframes())), reader.getframerate()


def _with_sizes(data: bytes) -> bytes:
    """A streamed WAV says 'unknown length' (0xFFFFFFFF); `wave` wants the real sizes."""
    size = len(data) - 44
    return data[:4] + (size + 36).to_bytes(4, "little") + data[8:40] + size.to_bytes(4, "little") + data[44:]


def _miniaudio(read):
    def run(data: bytes):
        decoded = read(data)
        assert decoded.nchannels == 1
        return np.asarray(decoded.samples, np.float32), decoded.sample_rate
    return run


def _opus(data: bytes):
    import soundfile
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return audio, rate


def _aac(data: bytes):
    if shutil.which("faad"):
        done = subprocess.run(["faad", "-w", "-f", "2", "-b", "1", "-"], input=data, capture_output=True, check=True)
        return _pcm16(done.stdout), None  # raw output: the rate is the request's
    import av
    with av.open(io.BytesIO(data), format="aac") as container:
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
        return np.concatenate(frames).astype(np.float32), container.streams.audio[0].rate


def _decoders() -> dict:
    import miniaudio
    return {"pcm": lambda d: (_pcm16(d), None), "wav": _wav, "mp3": _miniaudio(miniaudio.mp3_read_f32),
            "flac": _miniaudio(miniaudio.flac_read_f32), "opus": _opus, "aac": _aac}


def aligned_correlation(reference: np.ndarray, decoded: np.ndarray, max_lag: int) -> tuple[float, int]:
    """Pearson correlation of `decoded[lag:]` with `reference` at the lag in 0…max_lag (the codec's delay)
    where their cross-correlation peaks."""
    size = 1 << int(np.ceil(np.log2(reference.size + decoded.size)))
    xcorr = np.fft.irfft(np.fft.rfft(decoded, size) * np.conj(np.fft.rfft(reference, size)), size)
    lag = int(np.argmax(xcorr[:max_lag + 1]))
    n = min(reference.size, decoded.size - lag)
    return float(np.corrcoef(reference[:n], decoded[lag:lag + n])[0, 1]), lag


def fft_resample(audio: np.ndarray, source_rate: int, rate: int) -> np.ndarray:
    """Band-limited resampling by zero-padding or truncating the spectrum (no soxr)."""
    n = round(audio.size * rate / source_rate)
    spectrum = np.fft.rfft(audio)
    out = np.zeros(n // 2 + 1, complex)
    k = min(out.size, spectrum.size)
    out[:k] = spectrum[:k]
    return (np.fft.irfft(out, n) * n / audio.size).astype(np.float32)


RESAMPLER_PASSBAND = 0.9  # of the lower Nyquist frequency: soxr's HQ filter passes 91.3 % of it, a brick wall all


def passband(audio: np.ndarray, rate: int, source_rate: int) -> np.ndarray:
    """`audio` (at `rate`, resampled from `source_rate`) without its spectrum above RESAMPLER_PASSBAND of the lower
    Nyquist frequency: what any two good resamplers agree on (their transition bands differ)."""
    return below(audio, rate, RESAMPLER_PASSBAND * min(rate, source_rate) / 2)


LOSSY_BAND_HZ = 4000  # where a lossy encoder keeps the waveform of speech (`below`)


def below(audio: np.ndarray, rate: int, edge_hz: float = LOSSY_BAND_HZ) -> np.ndarray:
    """`audio` (at `rate`) without its spectrum above `edge_hz`. A lossy encoder keeps the waveform where speech
    is; above that it may cut the band or substitute noise for it (AAC's perceptual noise substitution), and the
    tiny models' random-weight audio is noise-like up to Nyquist: a whole-band waveform correlation then measured
    how noisy the input was more than the encoding (AAC at 24 kHz over random codes: 0.84-0.88 from a 64-wide tiny
    decoder, 0.76-0.86 from the 32-wide one; below 4 kHz 0.92 and more). tests/unit/test_gateway_encoders.py keeps
    the whole band, on speech-like audio."""
    spectrum = np.fft.rfft(audio)
    spectrum[np.fft.rfftfreq(audio.size, 1 / rate) > edge_hz] = 0
    return np.fft.irfft(spectrum, audio.size).astype(np.float32)


def assert_same_pcm16(got: np.ndarray, expected: np.ndarray) -> None:
    """Two requests' 16-bit audio with the same seed. Their float audio can differ by rounding where
    their chunks took other codec paths (tests/e2e/test_streaming.py, `PATH_ROUNDING`): a sample then
    lands one 16-bit step away. Anything more is a real difference."""
    assert got.shape == expected.shape
    assert np.abs(got.astype(np.int64) - expected.astype(np.int64)).max(initial=0) <= 1
