"""`clients.stream.read_wav`, what `voxlane say --ref-audio` sends: PCM WAV of any width, mono, in [-1, 1]."""
from __future__ import annotations

import wave

import numpy as np
import pytest

from clients.stream import read_wav
from tests.reference_audio import voiced


def write(path, frames: bytes, width: int, channels: int = 1, rate: int = 22050) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(frames)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_every_sample_width_reads_back(tmp_path, width):
    audio = voiced(0.5, 22050, peak=0.9)
    scale = 2 ** (8 * width - 1)  # full scale: the sample 2^(bits-1) is 1.0
    ints = np.round(audio.astype(np.float64) * scale).astype(np.int64)
    if width == 1:
        frames = (ints + 128).astype(np.uint8).tobytes()  # 8-bit WAV is unsigned
    else:
        frames = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints)
    write(tmp_path / "a.wav", frames, width)
    read, rate = read_wav(tmp_path / "a.wav")
    assert rate == 22050 and read.dtype == np.float32 and read.shape == audio.shape
    assert np.abs(read - audio).max() <= 0.5 / scale + 1e-7  # the rounding to `width` bytes, and float32's


def test_channels_are_averaged(tmp_path):
    left, right = np.full(100, 1000, np.int16), np.full(100, -3000, np.int16)
    write(tmp_path / "s.wav", np.stack([left, right], axis=1).astype("<i2").tobytes(), 2, channels=2)
    read, _ = read_wav(tmp_path / "s.wav")
    assert read.shape == (100,) and np.allclose(read, -1000 / 32768)
